"""Every surface that reads a recorded run (runs show, runs resume, diagram --trace, the
live view) draws or resumes it on the machine it recorded, on custom machines (the
approval and cost-cap examples), and says in one line when that machine is not at hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from innerloop.examples import with_approval
from innerloop.fsm import DEFAULT_SPEC
from innerloop.testing import AnthropicServer, reply
from innerloop.ui import Catalog
from tests.surfaces.machines import COSTCAP
from tests.test_cli import cli

KEY = {"ANTHROPIC_API_KEY": "sk-ant-cli-test", "NO_COLOR": "1"}
COSTCAP_PATH = "tests.surfaces.machines:COSTCAP"
APPROVAL_PATH = "innerloop.examples:with_approval"


def approval_named(what: str) -> str:
    """The one line of a surface given no --spec for an approval run: the recorded import
    path is named as the --spec to pass, never imported (a file is data)."""
    return (
        f"{what} ran on machine 'approval' (fingerprint {with_approval().fingerprint}), which "
        f"is not at hand; it was made by the spec at {APPROVAL_PATH} (a file is data: that "
        f"path is not imported); pass --spec {APPROVAL_PATH} naming that spec"
    )


def costcap_missing(what: str) -> str:
    return (
        f"{what} ran on machine 'costcap' (fingerprint {COSTCAP.fingerprint}), which is not "
        "at hand; pass --spec MODULE:ATTR naming that spec"
    )


class TestRunsShow:
    def test_approval_run_drawn_on_its_machine(self, recorded: dict[str, Any]) -> None:
        """The approval run is drawn on the approval machine when --spec names it; without,
        the import path it recorded is named, not imported."""
        db, out = f"sqlite:///{recorded['db']}", recorded["db"].parent / "appr.mmd"
        shown = cli("runs", "show", "appr", "--db", db, "--diagram", str(out))
        assert shown.returncode == 2
        assert shown.stderr == f"innerloop runs: error: {approval_named('run appr')}\n"
        assert not out.exists()
        shown = cli(
            "runs", "show", "appr", "--db", db, "--diagram", str(out), "--spec", APPROVAL_PATH
        )
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout.splitlines()[1] == (
            f"machine: machine 'approval' (fingerprint {with_approval().fingerprint}, "
            "import path innerloop.examples:with_approval)"
        )
        drawn = out.read_text()
        assert "%% machine: approval" in drawn
        assert "stream --> approve" in drawn

    def test_machine_not_at_hand_is_one_line(self, recorded: dict[str, Any]) -> None:
        """A cost-cap run (no import path) without --spec: one line, exit 2, no file;
        with --spec it is drawn on it."""
        db, out = f"sqlite:///{recorded['db']}", recorded["db"].parent / "cap.mmd"
        shown = cli("runs", "show", "cap", "--db", db, "--diagram", str(out))
        assert shown.returncode == 2
        assert shown.stderr == f"innerloop runs: error: {costcap_missing('run cap')}\n"
        assert not out.exists()
        shown = cli(
            "runs", "show", "cap", "--db", db, "--diagram", str(out), "--spec", COSTCAP_PATH
        )
        assert shown.returncode == 0, shown.stderr
        assert "check --> cost_cap" in out.read_text()


def test_runs_resume_finds_the_recorded_machine(recorded: dict[str, Any]) -> None:
    """The command line resumes a suspended approval run on the approval machine (named by
    --spec: the import path the store recorded is never imported): the approved call runs,
    then the model finishes."""
    db = f"sqlite:///{recorded['db']}"
    workspace = recorded["db"].parent
    (workspace / "a.txt").write_text("alpha")
    with AnthropicServer([reply("read it")]) as server:
        done = cli(
            "runs", "resume", "appr", "--db", db, "--answer", "true", "--tools", "files",
            "--workspace", str(workspace), "--base-url", server.base_url, "--no-live",
            "--spec", APPROVAL_PATH, env=KEY,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        (sent,) = [m for m in server.requests[0].body["messages"] if m["role"] == "user"][-1:]
    assert sent["content"][0]["tool_use_id"] == "c1"
    assert "alpha" in sent["content"][0]["content"]


class TestDiagramTrace:
    def test_each_run_on_its_own_machine(self, recorded: dict[str, Any]) -> None:
        """--run picks one run of a log; each is drawn on the machine it recorded."""
        log = str(recorded["log"])
        first = cli("diagram", "--trace", log, "--run", "1", "--format", "mermaid")
        assert first.returncode == 1
        assert first.stderr == f"innerloop diagram: {approval_named(f'run 1 of {log}')}\n"
        first = cli(
            "diagram", "--trace", log, "--run", "1", "--format", "mermaid", "--spec", APPROVAL_PATH
        )
        assert first.returncode == 0, first.stderr
        assert "%% machine: approval" in first.stdout
        assert "stream --> approve" in first.stdout
        second = cli("diagram", "--trace", log, "--run", "plain", "--format", "mermaid")
        assert second.returncode == 0, second.stderr
        assert "%% machine: innerloop" in second.stdout
        third = cli(
            "diagram", "--trace", log, "--run", "3", "--format", "mermaid", "--spec", COSTCAP_PATH
        )
        assert third.returncode == 0, third.stderr
        assert "%% machine: costcap" in third.stdout

    def test_one_line_when_it_cannot(self, recorded: dict[str, Any]) -> None:
        log = str(recorded["log"])
        merged = cli("diagram", "--trace", log, "--format", "mermaid")
        assert merged.returncode == 1
        assert merged.stderr == (
            f"innerloop diagram: {log} holds 3 runs; pick one with --run N (1 to 3) or --run last\n"
        )
        missing = cli("diagram", "--trace", log, "--run", "last", "--format", "mermaid")
        assert missing.returncode == 1
        assert missing.stderr == (f"innerloop diagram: {costcap_missing(f'run 3 of {log}')}\n")
        assert missing.stdout == ""


class TestLiveView:
    def test_each_run_on_its_own_machine(self, recorded: dict[str, Any], serve: Any) -> None:
        """The page lists the log's runs and the store's; each run's diagram is its own
        machine's; the cost-cap run's says why it cannot be drawn (409, one line)."""
        from innerloop.checkpoint import open_checkpointer

        store = open_checkpointer(f"sqlite:///{recorded['db']}")
        server = serve(Catalog(recorded["runs"], store, [DEFAULT_SPEC, with_approval()]))
        import httpx

        with httpx.Client(base_url=server.url) as http:
            for run_id, machine in (("log:three.jsonl:1", "approval"), ("db:appr", "approval")):
                detail = http.get(f"/api/run/{run_id}").json()
                assert (detail["machine"], detail["machine_error"]) == (machine, None)
                svg = http.get(f"/api/diagram/{run_id}")
                assert svg.status_code == 200
                assert "<title>approve</title>" in svg.text
            plain = http.get("/api/diagram/log:three.jsonl:2")
            assert plain.status_code == 200
            assert "<title>approve</title>" not in plain.text
            for run_id in ("log:three.jsonl:3", "db:cap"):
                detail = http.get(f"/api/run/{run_id}").json()
                assert detail["machine"] == "costcap"
                assert detail["machine_error"] == costcap_missing(f"run {run_id}").replace(
                    "which is not at hand;",
                    f"which is not at hand; the --spec given: 'innerloop' "
                    f"({DEFAULT_SPEC.fingerprint}), 'approval' ({with_approval().fingerprint});",
                )
                refused = http.get(f"/api/diagram/{run_id}")
                assert refused.status_code == 409
                assert refused.json()["error"] == detail["machine_error"]

    def test_given_spec_draws_it(self, recorded: dict[str, Any]) -> None:
        from innerloop.diagrams import build_diagram  # noqa: F401 (the catalog draws)

        catalog = Catalog(recorded["runs"], machines=[COSTCAP])
        svg = catalog.diagram("log:three.jsonl:3").decode()
        assert "<title>cost_cap</title>" in svg
        assert catalog.detail("log:three.jsonl:3")["machine_error"] is None


def test_build_diagram_of_a_finished_run(tmp_path: Path, make_harness: Any) -> None:
    """A run finished with run_sync can be drawn with its path."""
    from innerloop import HarnessParams
    from innerloop.diagrams import build_diagram, to_mermaid
    from innerloop.testing import ScriptedProvider

    harness = make_harness(
        HarnessParams(model="anthropic:claude-sonnet-4-5-20250929"),
        ScriptedProvider([reply("hi")], name="anthropic"),
        machine=COSTCAP,
    )
    run = harness.start("go")
    run.run_sync()
    assert [t.target for t in run.path] == [
        "assemble", "normalize", "call", "stream", "check", "model_complete"
    ]  # fmt: skip
    diagram = build_diagram(run)
    assert diagram.trace is not None
    assert diagram.trace.exit_reason == "model_complete"
    assert "check --> model_complete : ★" in to_mermaid(diagram)
