"""The live view's tree of child runs (machines inside machines), over real HTTP: a run
lists its children with their path, state, exit, turns, tokens and cost; a child opens on
its own (its transitions, messages, tool calls, its machine's diagram with its trace, its
live stream), for an event log and for a checkpoint store, on custom machines; paths
holding ``#``, ``/``, ``[`` and markup open and come back as data."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from innerloop import Child, Harness, HarnessParams, agent_tool, tool
from innerloop._eventlog import EventLog
from innerloop.checkpoint import open_checkpointer
from innerloop.diagrams._dot import END_FILL
from innerloop.diagrams._model import TIMES
from innerloop.examples import with_approval
from innerloop.fsm import (
    DEFAULT_SPEC,
    MachineSpec,
    StateSpec,
    child_handler,
    fan_out_handler,
    with_child_state,
)
from innerloop.fsm._spec import Handler
from innerloop.testing import ScriptedProvider, reply, tool_call
from innerloop.ui import Catalog

from .test_app import _sse
from .test_hardening import node_api

CALL = "t#1/x[2]<b>"
"""An agent tool call's id holding what a path may hold: ``#``, ``/``, ``[`` and markup."""
HELPER = f"helper[{CALL}]"
LEAF = f"{HELPER}/leaf"
RUN = "log:nested.jsonl:1"


@tool
async def lookup(city: str) -> str:
    """Look a city up."""
    return f"{city}: 545,000 people"


def _machine(name: str, state: str, handler: Handler) -> MachineSpec:
    return with_child_state(
        DEFAULT_SPEC,
        StateSpec(state, doc=f"runs {state}"),
        handler,
        source="idle",
        target="assemble",
        on_failure="failed",
    ).renamed(name)


def _kid(name: str, *answers: Any, **kw: Any) -> Child[Any]:
    tools = kw.pop("tools", ())
    provider = ScriptedProvider(list(answers), name="kid")
    params = HarnessParams(model="kid:k", tools=tools)
    return Child(name, params, providers={"kid": provider}, **kw)


def nested_spec() -> MachineSpec:
    """A custom machine whose ``survey`` state fans out to two ``web`` agents (on a
    custom machine of their own)."""
    web = _kid(
        "web",
        reply(tool_call("lookup", {"city": "Lisbon"}, id="w1")),
        reply("Lisbon: sunny"),
        reply("Porto: sunny"),
        tools=[lookup],
        machine=DEFAULT_SPEC.renamed("web-machine"),
    )
    return _machine("nest-ui", "survey", fan_out_handler(web, lambda s: ["Lisbon", "Porto"]))


def _helper() -> Child[Any]:
    """An agent tool's child whose machine runs a grandchild (``leaf``) in a state."""
    leaf = _kid("leaf", reply("leaf answer"))
    return _kid(
        "helper",
        reply("helper answer"),
        machine=_machine("helper-machine", "leaf", child_handler(leaf)),
    )


def write_nested_log(root: Path) -> MachineSpec:
    """Write ``root/nested.jsonl``: one run with a fan-out of two, an agent tool call
    and, inside its child, a grandchild; returns the run's machine."""
    spec = nested_spec()
    script = [reply(tool_call("helper", {"task": "help"}, id=CALL)), reply("All done.")]
    params = HarnessParams(model="scripted:m", tools=[agent_tool(_helper(), "Help.")])
    harness = Harness(params, [ScriptedProvider(script)], machine=spec)

    async def play() -> None:
        run = harness.start("Weather in two cities?")
        with EventLog(root / "nested.jsonl") as log:
            async for event in run.events():
                log.write(event)

    asyncio.run(play())
    return spec


@pytest.fixture(scope="module")
def nested(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, MachineSpec]:
    """A runs folder holding :func:`write_nested_log`'s log, and the run's machine."""
    root = tmp_path_factory.mktemp("nested")
    return root, write_nested_log(root)


def _get(url: str, **params: str) -> httpx.Response:
    return httpx.get(url, params=params, timeout=10)


def _row(child: dict[str, Any]) -> tuple[Any, ...]:
    keys = ("path", "parent", "depth", "machine", "status", "current", "exit_reason", "turns")
    return (*(child[k] for k in keys), child["input_tokens"], child["output_tokens"])


class TestLogTree:
    def test_the_run_lists_its_children_as_a_tree(
        self, nested: tuple[Path, MachineSpec], serve: Any
    ) -> None:
        """Each child with its path, the child above it, its machine, state, exit, turns
        and tokens; the grandchild under its agent tool's child."""
        root, spec = nested
        server = serve(Catalog(root, machines=[spec]))
        detail = _get(server.url + f"api/run/{RUN}").json()
        done = ("finished", "model_complete", "model_complete")
        assert [_row(c) for c in detail["children"]] == [
            ("web#1", None, 0, "web-machine", *done, 2, 20, 10),
            ("web#2", None, 0, "web-machine", *done, 1, 10, 5),
            (HELPER, None, 0, "helper-machine", *done, 2, 20, 10),  # its leaf's turn too
            (LEAF, HELPER, 1, "innerloop", *done, 1, 10, 5),
        ]
        assert detail["children_total"] == 4
        assert (detail["child"], detail["machine"], detail["machine_error"]) == (
            None,
            "nest-ui",
            None,
        )
        assert detail["exit_reason"] == "model_complete"

    def test_a_child_opens_on_its_own(self, nested: tuple[Path, MachineSpec], serve: Any) -> None:
        """A fan-out branch: its own transitions, tool calls and messages, its machine
        found inside the run's (a custom one, not given to the catalog)."""
        root, spec = nested
        server = serve(Catalog(root, machines=[spec]))
        detail = _get(server.url + f"api/run/{RUN}", child="web#1").json()
        assert (detail["id"], detail["child"], detail["above"]) == (RUN, "web#1", [])
        assert (detail["machine"], detail["machine_error"]) == ("web-machine", None)
        assert [t["target"] for t in detail["transitions"]][:3] == ["assemble", "normalize", "call"]
        assert detail["transitions"][-1]["target"] == "model_complete"
        assert [(t["name"], t["outcome"], t["output"]) for t in detail["tools"]] == [
            ("lookup", "ok", "Lisbon: 545,000 people")
        ]
        assert [(m["role"], m["text"]) for m in detail["messages"]] == [
            ("user", "Lisbon"),
            ("assistant", '→ lookup {"city": "Lisbon"}'),
            ("tool", "lookup: Lisbon: 545,000 people"),
            ("assistant", "Lisbon: sunny"),
        ]
        assert (detail["turns"], detail["children"], detail["children_total"]) == (2, [], 0)

    def test_paths_with_hash_slash_bracket_and_markup_open(
        self, nested: tuple[Path, MachineSpec], serve: Any
    ) -> None:
        """The agent tool's child (its call id holds ``#``, ``/``, ``[`` and ``<b>``)
        opens, lists its own child, and that grandchild opens with the way up."""
        root, spec = nested
        server = serve(Catalog(root, machines=[spec]))
        helper = _get(server.url + f"api/run/{RUN}", child=HELPER).json()
        assert (helper["child"], helper["machine"], helper["exit_reason"]) == (
            HELPER,
            "helper-machine",
            "model_complete",
        )
        assert [(c["path"], c["parent"], c["depth"]) for c in helper["children"]] == [
            (LEAF, HELPER, 0)
        ]
        assert [m["text"] for m in helper["messages"]] == [
            "help",
            "[leaf] leaf answer",  # its child's answer, in its history though in no event
            "helper answer",
        ]
        leaf = _get(server.url + f"api/run/{RUN}", child=LEAF).json()
        assert (leaf["child"], leaf["above"], leaf["machine"]) == (LEAF, [HELPER], "innerloop")
        assert [m["text"] for m in leaf["messages"]] == ["help", "leaf answer"]
        page = _get(server.url + f"api/run/{RUN}", child=LEAF, list="messages", offset="1").json()
        assert (page["total"], [m["text"] for m in page["messages"]]) == (2, ["leaf answer"])

    def test_a_childs_diagram_carries_its_trace(
        self, nested: tuple[Path, MachineSpec], serve: Any
    ) -> None:
        """A child's page draws its own machine with its trace (an agent tool's child's
        machine given to the catalog); the run's diagram lays its children's traces over
        the cluster of the state that ran them."""
        root, spec = nested
        helper = _helper().compiled.spec
        server = serve(Catalog(root, machines=[spec, helper]))
        svg = _get(server.url + f"api/diagram/{RUN}", child=HELPER).text
        assert svg.startswith("<?xml") or "<svg" in svg[:400]
        assert "leaf: runs innerloop" in svg  # its own child state's cluster
        assert f"model_finished {TIMES}1" in svg
        top = _get(server.url + f"api/diagram/{RUN}").text
        assert "survey: runs web&#45;machine" in top
        assert f"has_tool_calls {TIMES}1" in top  # web#1's lookup, drawn in the cluster
        assert f"model_finished {TIMES}2" in top
        # the branches' end is lit in the cluster as the run's own is at its level
        for node in ("model_complete", "survey__model_complete"):
            drawn = top.split(f"<title>{node}</title>", 1)[1].split("</g>", 1)[0]
            assert f'fill="{END_FILL}"' in drawn

    def test_a_childs_stream(self, nested: tuple[Path, MachineSpec], serve: Any) -> None:
        """The live stream of a child: its detail, then ``end`` (it has finished)."""
        root, spec = nested
        server = serve(Catalog(root, machines=[spec]))
        url = httpx.URL(server.url + f"api/events/{RUN}", params={"child": "web#2"})
        events = _sse(str(url))
        assert [kind for kind, _ in events] == ["run", "end"]
        assert (events[0][1]["child"], events[0][1]["turns"]) == ("web#2", 1)
        assert events[1][1] == {"status": "finished"}

    def test_an_unknown_child_is_a_404(self, nested: tuple[Path, MachineSpec], serve: Any) -> None:
        root, spec = nested
        server = serve(Catalog(root, machines=[spec]))
        for path in ("api/run/", "api/diagram/", "api/events/"):
            answer = _get(server.url + path + RUN, child="web#9")
            assert answer.status_code == 404
            assert answer.json() == {
                "error": f"run {RUN!r} has no child run 'web#9': ?child= names the path of "
                "one of its child runs (the run's detail lists them under children)"
            }

    def test_a_forged_host_is_refused_for_a_child_too(
        self, nested: tuple[Path, MachineSpec], serve: Any
    ) -> None:
        root, spec = nested
        server = serve(Catalog(root, machines=[spec]))
        answer = httpx.get(
            server.url + f"api/run/{RUN}",
            params={"child": "web#1"},
            headers={"Host": "evil.example"},
            timeout=10,
        )
        assert answer.status_code == 403

    def test_the_childs_machine_not_at_hand(
        self, nested: tuple[Path, MachineSpec], serve: Any
    ) -> None:
        """Without the run's machine, a child on a custom machine says what to pass, and
        its diagram is a 409 with the same line."""
        root, _ = nested
        server = serve(Catalog(root))
        detail = _get(server.url + f"api/run/{RUN}", child="web#1").json()
        assert detail["machine"] == "web-machine"
        assert detail["machine_error"].startswith(
            f"child 'web#1' of run {RUN} ran on machine 'web-machine'"
        )
        answer = _get(server.url + f"api/diagram/{RUN}", child="web#1")
        assert answer.status_code == 409
        assert answer.json() == {"error": detail["machine_error"]}


class TestBrokenChildLines:
    def test_a_child_event_without_a_path_is_the_runs_error(
        self, tmp_path: Path, serve: Any
    ) -> None:
        """A ``child_event`` line without a path or event is the run's error; a child's
        bad line is that child's error, shown in its row."""
        from .test_app import HEADER

        lines = [
            '{"type":"run_started","machine":"innerloop","fingerprint":"x","import_path":null,'
            '"state":"idle"}',
            '{"type":"child_event","path":7,"event":{}}',
            '{"type":"child_event","path":"a</td>","event":{"type":"transition","source":1}}',
        ]
        (tmp_path / "bad.jsonl").write_text(HEADER + "\n".join(lines) + "\n")
        server = serve(Catalog(tmp_path))
        detail = _get(server.url + "api/run/log:bad.jsonl:1").json()
        assert detail["error"] == (
            "bad.jsonl:3: a child_event without a path (a string) and an event (an object)"
        )
        (row,) = detail["children"]
        assert row["path"] == "a</td>"
        assert row["error"].startswith("bad.jsonl:4 (child a</td>): ")


class TestStoreTree:
    def test_a_stored_runs_children(self, tmp_path: Path, serve: Any) -> None:
        """A stored run that waits in a child state: the child is listed as suspended
        with its turns and tokens, its page shows its messages and tool calls (from the
        state the parent's checkpoint keeps), its diagram its own machine."""

        @tool
        async def delete_file(path: str) -> str:
            """Delete a file."""
            return f"deleted {path}"

        cleaner = _kid(
            "cleaner",
            reply(tool_call("delete_file", {"path": "build.log"}, id="k1")),
            reply("Deleted."),
            tools=[delete_file],
            machine=with_approval(),
        )
        spec = _machine("cleanup", "clean", child_handler(cleaner))
        db = f"sqlite:///{tmp_path / 'runs.db'}"
        harness = Harness(
            HarnessParams(model="scripted:m"),
            [ScriptedProvider([reply("gone")])],
            machine=spec,
            checkpointer=db,
        )
        assert harness.start("Remove build.log", run_id="r1").run_sync().exit_reason == (
            "suspended"
        )
        assert harness.checkpointer is not None
        harness.checkpointer.close()
        server = serve(Catalog(store=open_checkpointer(db), machines=[spec]))
        detail = _get(server.url + "api/run/db:r1").json()
        assert [
            (c["path"], c["status"], c["current"], c["turns"], c["input_tokens"])
            for c in detail["children"]
        ] == [("cleaner", "suspended", "approve", 1, 10)]
        assert detail["interrupt"] == "clean:1"  # what `runs resume --interrupt` takes
        child = _get(server.url + "api/run/db:r1", child="cleaner").json()
        assert (child["child"], child["machine"], child["machine_error"]) == (
            "cleaner",
            "approval",
            None,
        )
        assert [(m["role"], m["text"]) for m in child["messages"]] == [
            ("user", "Remove build.log"),
            ("assistant", '→ delete_file {"path": "build.log"}'),
        ]
        assert [(t["name"], t["outcome"]) for t in child["tools"]] == [("delete_file", "pending")]
        svg = _get(server.url + "api/diagram/db:r1", child="cleaner").text
        assert "approve" in svg
        assert _sse(str(httpx.URL(server.url + "api/events/db:r1", params={"child": "cleaner"})))[
            -1
        ] == ("end", {"status": "suspended"})
        resumed = Harness(
            HarnessParams(model="scripted:m"),
            [ScriptedProvider([reply("gone")])],
            machine=spec,
            checkpointer=db,
        )
        state = resumed.resume("r1", answer=True).run_sync()
        assert state.exit_reason == "model_complete"
        assert resumed.checkpointer is not None
        resumed.checkpointer.close()
        detail = _get(server.url + "api/run/db:r1").json()
        assert [
            (c["path"], c["status"], c["exit_reason"], c["turns"]) for c in detail["children"]
        ] == [("cleaner", "finished", "model_complete", 2)]
        child = _get(server.url + "api/run/db:r1", child="cleaner").json()
        assert [(m["role"], m["text"]) for m in child["messages"]] == [("assistant", "Deleted.")]


def test_the_page_asks_for_a_child_by_its_whole_path() -> None:
    """The page's API helper sends a child's path as ``?child=``, every ``#``, ``/``,
    ``[`` and ``<`` of it encoded."""
    calls = [
        f'api("/api/run/", "log:a.jsonl:1", {{ child: {json.dumps(LEAF)} }})',
        'api("/api/run/", "log:a.jsonl:1", { child: null })',
    ]
    assert node_api("http://127.0.0.1:1/?run=x", calls) == [
        "http://127.0.0.1:1/api/run/log%3Aa.jsonl%3A1?child=helper%5Bt%231%2Fx%5B2%5D%3Cb%3E%5D%2Fleaf",
        "http://127.0.0.1:1/api/run/log%3Aa.jsonl%3A1",
    ]


def test_a_log_keeps_a_bounded_number_of_children(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past ``MAX_CHILDREN`` child runs, the lines of a new one are the run's error."""
    from innerloop.ui import _view

    monkeypatch.setattr(_view, "MAX_CHILDREN", 2)
    step = {"type": "transition", "source": "idle", "target": "assemble", "guard": None}
    events = [{"type": "child_event", "path": f"web#{n}", "event": step} for n in (1, 2, 3, 1)]
    run = _view.fold(events)
    assert list(run.children) == ["web#1", "web#2"]
    assert run.children["web#1"].count("transitions") == 2
    assert (run.error, run.errors) == ("event 3: a child run past the first 2 (not kept)", 1)
