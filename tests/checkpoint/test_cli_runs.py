"""``innerloop run --db`` and ``innerloop runs list|show|resume|fork`` as subprocesses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from innerloop import DEFAULT_SPEC, Harness, HarnessParams
from innerloop.cli import exit_code
from innerloop.testing import AnthropicServer, ScriptedProvider, reply, tool_call
from innerloop.tools import ToolContext, ToolOutput, ToolSpec
from tests.test_cli import cli

MODEL = "claude-sonnet-4-5-20250929"
KEY = {"ANTHROPIC_API_KEY": "sk-ant-cli-test", "NO_COLOR": "1"}


def test_suspended_exit_code() -> None:
    """A suspended run exits with 5."""
    assert exit_code("suspended") == 5


def test_run_list_show_fork(tmp_path: Path) -> None:
    """run --db checkpoints the run; list shows it; show prints its path of states and
    writes the trace diagram; fork adds a message and runs on; the parent is listed too."""
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    with AnthropicServer([reply("first answer"), reply("second answer")]) as server:
        url = ["--base-url", server.base_url, "--no-live"]
        done = cli("run", "hello", "--db", db, "--run-id", "r1", *url, env=KEY)
        assert done.returncode == 0, done.stderr
        assert "run id: r1" in done.stdout

        listed = cli("runs", "list", "--db", db)
        assert listed.returncode == 0, listed.stderr
        (row,) = listed.stdout.splitlines()[1:]
        assert row.split()[:4] == ["r1", "finished", "model_complete", "1"]

        shown = cli("runs", "show", "r1", "--db", db, "--diagram", str(tmp_path / "t.mmd"))
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout.splitlines() == [
            "run r1: model_complete, 1 turns, 7 checkpoints",
            f"machine: machine 'innerloop' (fingerprint {DEFAULT_SPEC.fingerprint}, import "
            "path innerloop.fsm:DEFAULT_SPEC)",
            "path: idle -> assemble -> normalize -> call -> stream -> check -> model_complete",
            "last message (assistant): first answer",
            f"trace diagram: {tmp_path / 't.mmd'}",
        ]
        assert "stream --> check" in (tmp_path / "t.mmd").read_text()

        forked = cli("runs", "fork", "r1", "--db", db, "--message", "and more", *url, env=KEY)
        assert forked.returncode == 0, forked.stderr
        assert len(server.requests) == 2
        last = server.requests[1].body["messages"]
        assert [m["role"] for m in last] == ["user", "assistant", "user"]
    listed = cli("runs", "list", "--db", db)
    assert "(fork of r1 at" in listed.stdout


def test_resume_a_suspended_run(tmp_path: Path) -> None:
    """A run suspended on a tool's question is resumed from the command line with
    --answer; show printed what it waits for. The command line's params must have every
    tool the stored history calls: a run whose tool it lacks is refused, naming it."""
    db = f"sqlite:///{tmp_path / 'runs.db'}"

    async def ask(args: Any, ctx: ToolContext) -> ToolOutput:
        ctx.interrupt({"question": "which branch?"})

    def suspend(run_id: str, tool: str) -> None:
        params = HarnessParams(
            model=f"anthropic:{MODEL}", tools=[ToolSpec(tool, "Ask", {"type": "object"}, ask)]
        )
        provider = ScriptedProvider([reply(tool_call(tool, {}, id="a1"))], name="anthropic")
        harness = Harness(params, [provider], checkpointer=db)
        assert harness.start("go", run_id=run_id).run_sync().exit_reason == "suspended"
        harness.checkpointer.close()  # type: ignore[union-attr]

    suspend("s1", "ask")
    shown = cli("runs", "show", "s1", "--db", db)
    assert (
        "waiting (question, interrupt 'execute:1'): "
        '{"questions": [{"tool_use_id": "a1", "tool": "ask", '
        '"question": {"question": "which branch?"}}]}'
    ) in shown.stdout
    lacking = cli("runs", "resume", "s1", "--db", db, "--answer", "main", env=KEY)
    assert lacking.returncode == 2
    assert lacking.stderr.strip() == (
        "innerloop runs: error: run 's1': its history calls tool 'ask', which the params "
        "lack; build the params with the tools the run used (a model is refused a history "
        "that calls undeclared tools)"
    )

    suspend("s2", "read_file")  # a tool the command line's --tools files has
    refused = cli("runs", "resume", "s2", "--db", db, "--tools", "files", env=KEY)
    assert refused.returncode == 2
    assert "run 's2': it is suspended on a 'question' interrupt; pass answer=" in refused.stderr
    stale = cli(
        "runs", "resume", "s2", "--db", db, "--answer", "main", "--interrupt", "execute:9",
        "--tools", "files", env=KEY,
    )  # fmt: skip
    assert stale.returncode == 2
    assert stale.stderr.startswith(
        "innerloop runs: error: run 's2': the answer is for interrupt 'execute:9', which it "
        "no longer waits on; it waits on 'execute:1' (question: "
    )

    with AnthropicServer([reply("on main")]) as server:
        done = cli(
            "runs", "resume", "s2", "--db", db, "--answer", "main", "--interrupt", "execute:1",
            "--tools", "files", "--base-url", server.base_url, "--no-live", env=KEY,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        sent = server.requests[0].body["messages"][-1]["content"][0]
    assert (sent["tool_use_id"], sent["content"]) == ("a1", "main")


def test_unknown_run_is_a_usage_error(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    shown = cli("runs", "show", "nope", "--db", db)
    assert shown.returncode == 2
    assert shown.stderr.strip() == (
        "innerloop runs: error: no run 'nope' in the checkpoint store; `innerloop runs list "
        "--db URL` (or harness.runs()) lists the runs it holds"
    )
