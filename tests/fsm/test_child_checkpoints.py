"""Nested checkpoints: a child's progress is part of its parent's checkpoints, so a
parent resumed, forked or killed while a child runs continues each child where it
stopped, repeating none of its completed calls."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from innerloop import Child, HarnessParams, agent_tool, tool
from innerloop.checkpoint import decode, open_checkpointer
from innerloop.events import ChildEvent, Transition
from innerloop.providers import AnthropicProvider, OpenAIProvider
from innerloop.testing import (
    AnthropicServer,
    Fault,
    OpenAIServer,
    ScriptedProvider,
    assert_valid_history,
    reply,
)
from innerloop.testing import tool_call as call
from tests.checkpoint.test_crash import wait_until
from tests.fsm.nested_crash import CITIES, RUN_ID, harness
from tests.fsm.test_child import CLAUDE, GPT, OPENAI_KEY, _collect, _research_spec

ROOT = Path(__file__).resolve().parents[2]


def _city(body: dict[str, Any]) -> str:
    first = next(m for m in body["messages"] if m["role"] == "user")
    content = first["content"]
    return content if isinstance(content, str) else content[0]["text"]


class Branches:
    """The children's server's answers: a first call asks ``lookup(city)``, the second
    answers with its result; while ``hold`` names a city, that city's second call hangs."""

    def __init__(self, hold: str | None = None) -> None:
        self.hold = hold

    def __call__(self, body: dict[str, Any]) -> Any:
        city, last = _city(body), body["messages"][-1]
        if last["role"] != "tool":
            return reply(call("lookup", {"city": city}, id=f"call_{city}"))
        if city == self.hold:
            return Fault.hang()
        return reply(f"{city}: {last['content']}")


def _spawn(*args: str, stdout: int | None = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.fsm.nested_crash", *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=stdout,
        start_new_session=True,
    )


def _cities(server: OpenAIServer) -> list[str]:
    """Which city each request the children's server received was about, in order."""
    return [_city(r.body) for r in server.requests]


def test_kill_9_inside_a_fan_out_branch_loses_nothing_and_repeats_no_completed_call(
    tmp_path: Path,
) -> None:
    """Three branches over the OpenAI SDK, one at a time, in a process checkpointing to
    SQLite. While Porto's second model call is held by the server (Lisbon has ended,
    Porto's ``lookup`` has run), the process is killed with SIGKILL. A new process
    resumes the parent: Lisbon is not run again, Porto goes on from its model call (the
    only call repeated is the one that never completed) and Faro runs; every ``lookup``
    ran once, and the parent answers."""
    db, calls = str(tmp_path / "runs.db"), tmp_path / "calls.txt"
    answers = Branches(hold="Porto")
    with AnthropicServer([reply("All sunny.")]) as a, OpenAIServer(respond=answers) as o:
        args = (db, a.base_url, o.base_url, str(calls))
        proc = _spawn("start", *args)
        try:
            wait_until(lambda: len(o.requests) == 4, 60, "Porto's second model call")
            assert proc.poll() is None
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        assert proc.returncode == -signal.SIGKILL
        assert _cities(o) == ["Lisbon", "Lisbon", "Porto", "Porto"]

        store = open_checkpointer(f"sqlite:///{db}")
        try:
            last = decode(store.rows(RUN_ID))
        finally:
            store.close()
        assert (last.info.state, last.info.source) == ("survey", None)
        saved = last.state.notes["children.runs"]
        assert saved["web#1"]["state"]["final_state"] == "model_complete"
        assert saved["web#2"]["at"] == "call"

        answers.hold = None
        done = _spawn("resume", *args, stdout=subprocess.PIPE)
        out, _ = done.communicate(timeout=120)
        assert done.returncode == 0
        cities = _cities(o)
    ended = json.loads(out.decode().strip().splitlines()[-1])
    assert cities[4:] == ["Porto", "Faro", "Faro"]
    assert calls.read_text().splitlines() == ["Lisbon", "Porto", "Faro"]
    assert ended == {
        "exit_reason": "model_complete",
        "outputs": ["Lisbon: Lisbon is sunny", "Porto: Porto is sunny", "Faro: Faro is sunny"],
        "answer": "All sunny.",
        "left": None,
    }


def test_a_fork_at_a_checkpoint_inside_a_branch_goes_on_in_that_branch(tmp_path: Path) -> None:
    """A finished fan-out, checkpointed at each child step: forked at the checkpoint
    taken when Porto's ``lookup`` result was in (Lisbon ended), the new run makes only
    Porto's second call and Faro's two, runs ``lookup`` for Faro alone, and ends."""
    db, calls = str(tmp_path / "runs.db"), tmp_path / "calls.txt"
    parent = AnthropicServer([reply("All sunny."), reply("Sunny again.")])
    with parent as a, OpenAIServer(respond=Branches()) as o:
        h = harness(db, a.base_url, o.base_url, calls)
        assert h.start(CITIES, run_id=RUN_ID).run_sync().exit_reason == "model_complete"
        assert len(o.requests) == 6

        def porto_at_call(seq: int) -> bool:
            saved = h.checkpoint(RUN_ID, seq).state.notes.get("children.runs", {})
            porto = saved.get("web#2")
            return porto is not None and porto["at"] == "call" and porto["state"]["turns"]

        inside = [i for i in h.checkpoints(RUN_ID) if i.source is None]
        at = next(i.seq for i in inside if porto_at_call(i.seq))
        calls.write_text("")
        forked = h.fork(RUN_ID, at=at, new_run_id="fork-1").run_sync()
        cities = _cities(o)[6:]
    assert cities == ["Porto", "Faro", "Faro"]
    assert calls.read_text().splitlines() == ["Faro"]
    assert forked.exit_reason == "model_complete"
    outputs = [c["output"] for c in forked.notes["children"]["web"]]
    assert outputs == ["Lisbon: Lisbon is sunny", "Porto: Porto is sunny", "Faro: Faro is sunny"]
    assert forked.history[-1].text == "Sunny again."
    assert_valid_history(forked.history)


def test_an_agent_tools_child_resumed_from_a_checkpoint_inside_it(
    make_harness: Any, tmp_path: Path
) -> None:
    """An agent tool's child, checkpointed in the parent at each of its steps: a run
    resumed from the checkpoint taken inside the child after its ``lookup`` ran makes
    only the child's last call (``lookup`` does not run again), and the child's answer
    is the parent's tool result."""
    ran: list[str] = []

    @tool
    async def lookup(city: str) -> str:
        """Look a city's weather up."""
        ran.append(city)
        return f"{city} is sunny"

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    parent_script = [
        reply(call("forecaster", {"task": "Lisbon"}, id="toolu_01")),
        reply("Sunny."),
        reply("Sunny, again."),
    ]
    with AnthropicServer(parent_script) as a, OpenAIServer(respond=Branches()) as o:
        forecaster = Child(
            "forecaster",
            HarnessParams(model=GPT, tools=[lookup]),
            providers={"openai": OpenAIProvider(OPENAI_KEY, base_url=o.base_url)},
        )
        params = HarnessParams(model=CLAUDE, tools=[agent_tool(forecaster, "Forecasts.")])
        h = make_harness(
            params,
            [AnthropicProvider("sk-ant-api03-crash-0123456789", base_url=a.base_url)],
            checkpointer=url,
        )
        assert h.start("Weather?", run_id="a1").run_sync().exit_reason == "model_complete"

        def child_at_call(seq: int) -> bool:
            saved = h.checkpoint("a1", seq).state.notes.get("children.runs", {})
            child = saved.get("forecaster[toolu_01]")
            return child is not None and child["at"] == "call" and child["state"]["turns"]

        at = next(i.seq for i in h.checkpoints("a1") if i.source is None and child_at_call(i.seq))
        assert h.checkpoint("a1", at).info.state == "execute"
        forked = h.fork("a1", at=at, new_run_id="a2").run_sync()
        requests = len(o.requests)
        result = a.requests[2].body["messages"][-1]["content"][0]
    assert (requests, ran) == (3, ["Lisbon"])
    assert (result["tool_use_id"], result["content"]) == ("toolu_01", "Lisbon: Lisbon is sunny")
    assert forked.exit_reason == "model_complete"
    assert "children.runs" not in forked.notes
    assert_valid_history(forked.history)


def test_a_child_state_left_early_goes_on_where_its_child_stopped(make_harness: Any) -> None:
    """The host stops reading while the child (in a child state) starts its second turn:
    ``harness.resume(run)`` continues the child from there, so its first answer is not
    asked for again and its ``lookup`` does not run again."""
    ran: list[str] = []

    @tool
    async def lookup(city: str) -> str:
        """Look a city's weather up."""
        ran.append(city)
        return f"{city} is sunny"

    kid = ScriptedProvider(
        [reply(call("lookup", {"city": "Lisbon"}, id="k1")), reply("Lisbon: sunny.")], name="kid"
    )
    child = Child("research", HarnessParams(model="kid:m", tools=[lookup]), providers={"kid": kid})
    spec = _research_spec(child)
    harness = make_harness(
        HarnessParams(model="scripted:m"), ScriptedProvider([reply("Sunny.")]), machine=spec
    )
    run = harness.start("Weather?")

    async def leave() -> None:
        async with contextlib.aclosing(run.events()) as events:
            async for event in events:
                if (
                    isinstance(event, ChildEvent)
                    and isinstance(event.event, Transition)
                    and (event.event.source, event.event.target) == ("check", "assemble")
                ):
                    break

    asyncio.run(leave())
    assert run.stopped_at == "research"
    assert run.state.notes["children.runs"]["research"]["at"] == "assemble"
    resumed = harness.resume(run)
    asyncio.run(_collect(resumed))
    assert (len(kid.requests), ran) == (2, ["Lisbon"])
    assert resumed.state.exit_reason == "model_complete"
    assert resumed.state.notes["children"]["research"]["output"] == "Lisbon: sunny."
    assert "children.runs" not in resumed.state.notes
