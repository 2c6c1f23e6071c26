"""Nested runs on the durable engines: a child state and a handoff as Temporal and DBOS
workflows, an interrupt inside a child resumed through each engine's client, a ``kill -9``
inside a child on DBOS with SQLite, and the errors of a child a worker cannot find.

Every model is Claude through the real Anthropic SDK client against one loopback server
of this process (``tests/durable/nested_app.py`` answers by who asks and what it has), so
the server's requests count every model call, on every worker, exactly."""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from dbos import DBOSClient
from temporalio.client import Client

from innerloop import Answer, Child, Harness, HarnessParams
from innerloop.durable import LoopApp, LoopDefinition
from innerloop.durable.dbos import DBOSLoopClient
from innerloop.durable.temporal import (
    TemporalLoopHandle,
    TemporalLoops,
    TemporalOptions,
    temporal_worker,
)
from innerloop.events import Event
from innerloop.fsm import (
    ChildRun,
    HarnessState,
    Interrupt,
    PhaseContext,
    StateSpec,
    child_handler,
    with_child_state,
)
from innerloop.testing import AnthropicServer, FakeClock, Fault, Reply, ScriptedProvider, reply
from tests.durable._checks import started, tool_starts, until
from tests.durable._procs import Processes, TemporalServer, spawn_dbos_worker
from tests.durable.conftest import dbos_sqlite
from tests.durable.nested_app import (
    SURVEYS,
    answer,
    child_first,
    city,
    nested_app,
    system,
    tool_results,
)
from tests.durable.test_steps import in_memory

T = TypeVar("T")
NESTED_APP = "tests.durable.nested_app:app"

NESTED_TREE = [
    ("", "run_started"),
    ("research", "run_started"),
    ("research", "model_response"),
    ("research", "tool_executed"),
    ("research", "model_response"),
    ("research", "finished"),
    ("", "model_response"),
    ("", "tool_executed"),
    ("", "model_response"),
    ("writer", "run_started"),
    ("writer", "model_response"),
    ("writer", "finished"),
    ("", "finished"),
]
"""The starts, answers, tool calls and ends of the nested loop and its two children, by
the path of the run they belong to (the loop's own: "")."""
NESTED_STEPS = [
    ("model_call", ["research"]),
    ("tool_call", ["research"]),
    ("model_call", ["research"]),
    ("model_call", []),
    ("tool_call", []),
    ("model_call", []),
    ("model_call", ["writer"]),
]
"""The steps of the nested loop, each with the child it was for (none: the loop's own)."""
AGENT_STEPS = [
    ("model_call", []),
    ("model_call", ["forecaster"]),
    ("tool_call", ["forecaster"]),
    ("model_call", ["forecaster"]),
    ("model_call", []),
]
"""The steps of the agent-tool loop: the agent tool's call is none of them."""
NESTED_ASKED = Counter({"research 0": 1, "research 1": 1, "plan 0": 1, "plan 1": 1, "write 1": 1})
"""The model calls of one nested loop: each agent's, by how many tool results it had."""


@pytest.fixture
def server() -> Iterator[AnthropicServer]:
    with AnthropicServer(respond=answer) as s:
        yield s


def asked(server: AnthropicServer) -> Counter[str]:
    """The requests the server received, as ``"<agent> <tool results>"`` counts."""
    return Counter(f"{system(r.body)[4:-1]} {len(tool_results(r.body))}" for r in server.requests)


def tree(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(path, type) of each start, answer, tool call and end, children's included."""
    kinds = {"run_started", "model_response", "tool_executed", "finished"}
    found = []
    for e in events:
        path, own = (e["path"], e["event"]) if e["type"] == "child_event" else ("", e)
        if own["type"] in kinds:
            found.append((path, own["type"]))
    return found


def in_process(loop: str, tmp: Path, answer_with: Any = None) -> HarnessState:
    """Loop ``loop`` run with ``Harness`` in this process (resumed once with
    ``answer_with`` when given), against a loopback server of its own."""
    tmp.mkdir()
    with AnthropicServer(respond=answer) as own, pytest.MonkeyPatch.context() as mp:
        mp.setenv("INNERLOOP_TEST_DIR", str(tmp))
        d = nested_app(own.base_url).get(loop)
        harness = Harness(d.params, d.providers, machine=d.machine)
        state = harness.run_sync("go")
        if answer_with is not None:
            assert state.exit_reason == "suspended"
            state = harness.resume(state, answer_with).run_sync()
    assert state.exit_reason == "model_complete"
    return state


def histories(*states: HarnessState) -> list[list[dict[str, Any]]]:
    return [[m.to_dict() for m in s.history] for s in states]


# -- without an engine ---------------------------------------------------------------------


def in_a_workflow(
    loop: str, server: AnthropicServer
) -> tuple[HarnessState, list[dict[str, Any]], list[tuple[str, list[str]]]]:
    """Loop ``loop`` run as a workflow on an engine that runs each step at once: its
    final state, its events, and its steps as (step, the child it was for)."""
    app = nested_app(server.base_url)
    steps: list[tuple[str, list[str]]] = []
    run_step = in_memory(app)

    async def call(step: str, args: dict[str, Any]) -> dict[str, Any]:
        steps.append((step, args.get("child", [])))
        return await run_step(step, args)

    async def main() -> tuple[HarnessState, list[dict[str, Any]]]:
        run = app.harness(loop, call, FakeClock()).start("go")
        return run.state, [e.to_dict() async for e in run.events()]

    state, events = asyncio.run(main())
    return state, events, steps


def test_a_childs_calls_are_steps_naming_the_child(server: AnthropicServer, log_dir: Path) -> None:
    """In a workflow the child's model and tool calls (and the handoff's) go through the
    step caller, each naming its child; the run ends as in process."""
    expected = in_process("nested", log_dir / "in-process")
    state, events, steps = in_a_workflow("nested", server)
    assert steps == NESTED_STEPS
    assert histories(state) == histories(expected)
    assert tree(events) == NESTED_TREE
    assert asked(server) == NESTED_ASKED
    assert (state.usage, state.cost_usd) == (expected.usage, expected.cost_usd)
    assert state.usage.total_tokens == 75  # five answers of 15 tokens, three of children


def test_an_agent_tools_child_runs_in_the_workflow_its_calls_steps(
    server: AnthropicServer, log_dir: Path
) -> None:
    """An agent tool's call is no step: its child runs in the workflow, and the child's
    model and tool calls are steps naming it; the tool result and the history are the
    in-process ones."""
    expected = in_process("agent-tool", log_dir / "in-process")
    state, events, steps = in_a_workflow("agent-tool", server)
    assert steps == AGENT_STEPS
    assert histories(state) == histories(expected)
    assert state.history[-1].text == "Forecast: Sunny (looked at sky)."
    assert tree(events) == [
        ("", "run_started"),
        ("", "model_response"),
        ("forecaster[toolu_a1]", "run_started"),
        ("forecaster[toolu_a1]", "model_response"),
        ("forecaster[toolu_a1]", "tool_executed"),
        ("forecaster[toolu_a1]", "model_response"),
        ("forecaster[toolu_a1]", "finished"),
        ("", "tool_executed"),
        ("", "model_response"),
        ("", "finished"),
    ]
    assert (state.usage, state.cost_usd) == (expected.usage, expected.cost_usd)
    assert [c for _, c in tool_starts(log_dir)] == ["toolu_f1"]


def test_a_child_the_worker_cannot_find_is_named_with_the_fix() -> None:
    """A step naming a child the loop's machine does not run, a child whose models have
    no provider, and two children of one name are refused with what to do."""
    model = ScriptedProvider([reply("hi")], name="m")
    kid = Child("kid", HarnessParams(model="k:x"))
    refused = (
        "child 'kid': no provider given for k; give the child providers={'k': ...} or the loop one"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(refused)}$"):
        LoopDefinition(HarnessParams(model="m:x"), {"m": model}, machine=child_first(kid))
    twin = Child("kid", HarnessParams(model="m:x"))
    spec = with_child_state(
        child_first(Child("kid", HarnessParams(model="m:x"))),
        StateSpec("again"),
        child_handler(twin),
        source="check",
        target="model_complete",
        on_failure="failed",
    )
    with pytest.raises(ValueError, match=r"^machine 'innerloop' runs two different children "):
        LoopDefinition(HarnessParams(model="m:x"), {"m": model}, machine=spec)
    app = LoopApp({"plain": LoopDefinition(HarnessParams(model="m:x"), {"m": model})})
    call = {"name": "look", "id": "t1", "input": {}, "type": "tool_use"}
    with pytest.raises(KeyError) as unknown:
        asyncio.run(app.execute("tool_call", {"loop": "plain", "child": ["kid"], "call": call}))
    assert unknown.value.args[0] == (
        "loop 'plain' runs no child named 'kid' in a state of its machine 'innerloop' or an "
        "agent tool (its children: none); a durable worker finds a child where the loop runs "
        "it: put it in a state of the machine in the worker's LoopApp (with_child_state with "
        "child_handler, fan_out_handler or handoff_handler) or in its tools (agent_tool)"
    )


def test_a_child_made_as_the_run_goes_is_refused_in_the_workflow() -> None:
    """A handler that runs a child the loop does not declare (made as it runs) fails the
    workflow's run with what to do, before any step of the child."""
    model = ScriptedProvider([reply("hi")], name="m")
    declared = Child("kid", HarnessParams(model="m:x"))

    def runs(child: Child[Any]) -> Any:
        async def handler(ctx: PhaseContext) -> AsyncIterator[Event]:
            async for event in ChildRun(ctx, child, "hi").events():
                yield event

        handler.child = declared  # type: ignore[attr-defined]  # drawn as this one
        return handler

    unknown = Child("stray", HarnessParams(model="m:x"))
    twin = Child("kid", HarnessParams(model="m:x"))
    steps: list[str] = []

    async def call(step: str, args: dict[str, Any]) -> dict[str, Any]:
        steps.append(step)
        return {}

    def refusal(child: Child[Any]) -> str:
        spec = child_first(declared).replace_handler("helper", runs(child))
        app = LoopApp({"l": LoopDefinition(HarnessParams(model="m:x"), {"m": model}, machine=spec)})
        with pytest.raises((KeyError, ValueError)) as info:
            app.harness("l", call, FakeClock()).run_sync("go")
        return str(info.value.args[0])

    assert refusal(unknown).startswith(
        "loop 'l' runs no child named 'stray' in a state of its machine 'innerloop' or an "
        "agent tool (its children: kid); "
    )
    assert refusal(twin) == (
        "child 'kid' of loop 'l' is not the child a worker finds under that name in the "
        "loop; a durable loop runs the children of its machine's states and its agent "
        "tools: give this one a name of its own and put it in a state (with_child_state) "
        "or an agent tool of the loop"
    )
    assert steps == []


# -- Temporal --------------------------------------------------------------------------------


def on_temporal(
    server: TemporalServer,
    models: AnthropicServer,
    queue: str,
    body: Callable[[TemporalLoops], Awaitable[T]],
) -> T:
    """Run ``body`` with a worker of the nested app (its models on ``models``) in this
    process."""

    async def main() -> T:
        client = await Client.connect(server.address)
        options = TemporalOptions(heartbeat_timeout=2)
        app = nested_app(models.base_url)
        async with temporal_worker(client, app, task_queue=queue, options=options):
            return await asyncio.wait_for(body(TemporalLoops(client, queue)), 60)

    return asyncio.run(main())


async def activities(loops: TemporalLoops, id: str) -> list[tuple[str, list[str]]]:
    """The activities the workflow ``id`` scheduled: (name, the child it was for)."""
    history = await loops.client.get_workflow_handle(id).fetch_history()
    found = []
    for event in history.events:
        if event.HasField("activity_task_scheduled_event_attributes"):
            attributes = event.activity_task_scheduled_event_attributes
            args = json.loads(attributes.input.payloads[0].data)
            step = attributes.activity_type.name.removeprefix("innerloop.")
            found.append((step, args.get("child", [])))
    return found


def test_child_state_and_handoff_run_as_a_temporal_workflow(
    temporal_server: TemporalServer, server: AnthropicServer, log_dir: Path
) -> None:
    """The child's and the handoff's model and tool calls are activities naming their
    child; their events come through the events query with their paths; usage and cost
    roll up; the history is the in-process one; every call ran once."""
    expected = in_process("nested", log_dir / "in-process")

    async def body(loops: TemporalLoops) -> tuple[Any, list[dict[str, Any]], Any]:
        handle = await loops.start("nested", "go", id="nested")
        events = [e async for e in handle.events(poll=0.05)]
        return await handle.result(), events, await activities(loops, "nested")

    state, events, scheduled = on_temporal(temporal_server, server, "nested", body)
    assert histories(state) == histories(expected)
    assert scheduled == NESTED_STEPS
    assert tree(events) == NESTED_TREE
    assert asked(server) == NESTED_ASKED
    assert [c for _, c in tool_starts(log_dir)] == ["toolu_r1", "toolu_p1"]
    assert (state.usage, state.cost_usd) == (expected.usage, expected.cost_usd)
    assert state.cost_usd is not None
    assert events[-1]["usage"]["input_tokens"] == 50  # the loop's own two answers and its
    assert events[-1]["usage"]["output_tokens"] == 25  # children's three, 10 + 5 each


def test_agent_tool_runs_its_child_in_a_temporal_workflow(
    temporal_server: TemporalServer, server: AnthropicServer, log_dir: Path
) -> None:
    """The agent tool's call is no activity; its child's calls are, naming it."""
    expected = in_process("agent-tool", log_dir / "in-process")

    async def body(loops: TemporalLoops) -> tuple[Any, Any]:
        handle = await loops.start("agent-tool", "go", id="agent-tool")
        return await handle.result(), await activities(loops, "agent-tool")

    state, scheduled = on_temporal(temporal_server, server, "agent-tool", body)
    assert histories(state) == histories(expected)
    assert scheduled == AGENT_STEPS
    assert asked(server) == Counter(
        {"delegate 0": 1, "forecast 0": 1, "forecast 1": 1, "delegate 1": 1}
    )


async def temporal_suspended(handle: TemporalLoopHandle) -> Interrupt:
    while (interrupt := await handle.interrupt()) is None:  # noqa: ASYNC110  a query
        await asyncio.sleep(0.05)
    return interrupt


def resumed_on_temporal(
    temporal_server: TemporalServer, server: AnthropicServer, loop: str, answer_with: Any
) -> tuple[HarnessState, Interrupt, list[dict[str, Any]]]:
    """Loop ``loop`` as a Temporal workflow, resumed once with ``answer_with`` through
    the ``resume`` update when it waits: its final state, the interrupt it waited on,
    its events."""

    async def body(loops: TemporalLoops) -> tuple[Any, Interrupt, list[dict[str, Any]]]:
        handle = await loops.start(loop, "go", id=loop)
        interrupt = await temporal_suspended(handle)
        await handle.resume(answer_with)
        state = await handle.result()
        return state, interrupt, [e async for e in handle.events(poll=0.05)]

    return on_temporal(temporal_server, server, loop, body)


ASKING = [("nested-approval", True, "approval"), ("nested-question", "blue", "question")]


def ends(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(path, exit reason) of each end of the loop ("") and of its children, in order."""
    return [
        (e["path"], e["event"]["exit_reason"])
        if e["type"] == "child_event"
        else ("", e["exit_reason"])
        for e in events
        if e["type"] == "finished"
        or (e["type"] == "child_event" and e["event"]["type"] == "finished")
    ]


def assert_resumed_in_the_child(
    kind: str,
    interrupt: Interrupt,
    state: HarnessState,
    expected: HarnessState,
    events: list[dict[str, Any]],
    server: AnthropicServer,
    log_dir: Path,
) -> None:
    """The run suspended once, on its child's question, and went on to the in-process
    history; each model call and tool call ran once."""
    child, agent = ("cleaner", "clean") if kind == "approval" else ("asker", "ask")
    assert (interrupt.kind, interrupt.state, interrupt.tool_use_ids) == (
        kind,
        "helper",
        ("toolu_c1",),
    )
    assert histories(state) == histories(expected)
    assert state.exit_reason == "model_complete"
    assert state.interrupt is None
    assert ends(events) == [
        (child, "suspended"),
        ("", "suspended"),
        (child, "model_complete"),
        ("", "model_complete"),
    ]
    assert state.notes == expected.notes
    assert state.notes["children"][child]["exit_reason"] == "model_complete"
    assert asked(server) == Counter({f"{agent} 0": 1, f"{agent} 1": 1, "oversee 0": 1})
    assert [c for _, c in tool_starts(log_dir)] == ["toolu_c1"]


# -- DBOS ------------------------------------------------------------------------------------


async def dbos_suspended(loops: DBOSLoopClient, id: str) -> Interrupt:
    while (interrupt := await loops.interrupt(id)) is None:  # noqa: ASYNC110  another process
        await asyncio.sleep(0.05)
    return interrupt


def resumed_on_dbos(
    procs: Processes,
    tmp_path: Path,
    server: AnthropicServer,
    log_dir: Path,
    loop: str,
    answer_with: Any,
) -> tuple[HarnessState, Interrupt, list[dict[str, Any]]]:
    """Loop ``loop`` as a DBOS workflow on a worker process (SQLite), resumed once with
    ``answer_with`` through ``DBOSLoopClient.resume`` when it waits: its final state,
    the interrupt it waited on, its events."""
    url = dbos_sqlite(tmp_path)
    env = {"INNERLOOP_TEST_DIR": str(log_dir), "INNERLOOP_TEST_LOOPBACK": server.base_url}

    async def main() -> tuple[Any, Interrupt, list[dict[str, Any]]]:
        await asyncio.to_thread(spawn_dbos_worker, procs, "w", url, env, NESTED_APP)
        client = DBOSClient(system_database_url=url)
        try:
            loops = DBOSLoopClient(client)
            await loops.start(loop, "go", id="nested")
            interrupt = await asyncio.wait_for(dbos_suspended(loops, "nested"), 60)
            await loops.resume("nested", answer_with)
            state = await asyncio.wait_for(loops.result("nested"), 60)
            return state, interrupt, [e async for e in loops.events("nested")]
        finally:
            client.destroy()

    return asyncio.run(main())


def test_abort_reaches_a_running_child_at_its_next_turn(
    procs: Processes, tmp_path: Path, server: AnthropicServer, log_dir: Path
) -> None:
    """An abort message sent while the child's tool runs takes effect when the child
    enters its next turn: the child ends in ``aborted`` without another model call, and
    so does the loop."""
    (log_dir / "hold-census").touch()
    url = dbos_sqlite(tmp_path)
    env = {"INNERLOOP_TEST_DIR": str(log_dir), "INNERLOOP_TEST_LOOPBACK": server.base_url}

    async def main() -> tuple[Any, list[dict[str, Any]]]:
        await asyncio.to_thread(spawn_dbos_worker, procs, "w", url, env, NESTED_APP)
        client = DBOSClient(system_database_url=url)
        try:
            loops = DBOSLoopClient(client)
            await loops.start("nested", "go", id="nested-abort")
            await until(started(log_dir, "toolu_r1"), 60, "the child's tool call")
            await loops.abort("nested-abort", "the host said stop")
            (log_dir / "hold-census").unlink()
            state = await asyncio.wait_for(loops.result("nested-abort"), 60)
            return state, [e async for e in loops.events("nested-abort")]
        finally:
            client.destroy()

    state, events = asyncio.run(main())
    assert state.exit_reason == "aborted"
    assert state.abort.reason == "the host said stop"
    assert state.notes["children"]["research"]["exit_reason"] == "aborted"
    assert asked(server) == Counter({"research 0": 1})
    assert tree(events)[-2:] == [("research", "finished"), ("", "finished")]
    assert [c for _, c in tool_starts(log_dir)] == ["toolu_r1"]


def test_worker_killed_inside_a_child_loses_nothing_and_repeats_no_call(
    procs: Processes, tmp_path: Path, log_dir: Path
) -> None:
    """kill -9 the DBOS worker (SQLite) while the research child waits for its second
    answer (the server holds it until the worker is dead); a new worker recovers the
    workflow: the child's finished model call and tool call are not made again, only
    the call in flight is, and the loop ends with the in-process history, events and
    usage."""
    expected = in_process("nested", tmp_path / "in-process")
    held: list[Any] = []

    def respond(body: Any) -> Reply | Fault:
        if system(body) == "You research." and tool_results(body) and not held:
            held.append(body)
            return Fault.hang()  # until the worker that asked is killed
        return answer(body)

    url = dbos_sqlite(tmp_path)

    async def main(server: AnthropicServer) -> tuple[Any, list[dict[str, Any]], int, int]:
        env = {"INNERLOOP_TEST_DIR": str(log_dir), "INNERLOOP_TEST_LOOPBACK": server.base_url}
        w1 = await asyncio.to_thread(spawn_dbos_worker, procs, "w1", url, env, NESTED_APP)
        client = DBOSClient(system_database_url=url)
        try:
            loops = DBOSLoopClient(client)
            await loops.start("nested", "go", id="nested-crash")
            await until(lambda: bool(held), 60, "the child's second model call")
            procs.kill9(w1)
            w2 = await asyncio.to_thread(spawn_dbos_worker, procs, "w2", url, env, NESTED_APP)
            state = await asyncio.wait_for(loops.result("nested-crash"), 60)
            events = [e async for e in loops.events("nested-crash")]
            return state, events, w1.pid, w2.pid
        finally:
            client.destroy()

    with AnthropicServer(respond=respond) as server:
        state, events, killed, successor = asyncio.run(main(server))
    assert histories(state) == histories(expected)
    # the call in flight at the kill was made twice; every finished call once
    assert asked(server) == NESTED_ASKED + Counter({"research 1": 1})
    assert tool_starts(log_dir) == [(killed, "toolu_r1"), (successor, "toolu_p1")]
    assert tree(events) == NESTED_TREE
    assert (state.usage, state.cost_usd) == (expected.usage, expected.cost_usd)


# -- a child asks, on both engines -------------------------------------------------------------


def resumed_on(
    engine: str,
    request: pytest.FixtureRequest,
    server: AnthropicServer,
    log_dir: Path,
    loop: str,
    answer_with: Any,
) -> tuple[HarnessState, Interrupt, list[dict[str, Any]]]:
    """Loop ``loop`` on ``engine`` (``temporal``, ``dbos``), resumed once with
    ``answer_with`` through its client."""
    if engine == "temporal":
        temporal_server = request.getfixturevalue("temporal_server")
        return resumed_on_temporal(temporal_server, server, loop, answer_with)
    procs, tmp_path = request.getfixturevalue("procs"), request.getfixturevalue("tmp_path")
    return resumed_on_dbos(procs, tmp_path, server, log_dir, loop, answer_with)


def asked_by_city(server: AnthropicServer) -> Counter[str]:
    """As :func:`asked`, a fan-out branch's requests named by their city too."""
    return Counter(
        f"{system(r.body)[4:-1]}{' ' + city(r.body) if system(r.body) in SURVEYS else ''}"
        f" {len(tool_results(r.body))}"
        for r in server.requests
    )


@pytest.mark.parametrize("engine", ["temporal", "dbos"])
@pytest.mark.parametrize(("loop", "answer_with", "kind"), ASKING)
def test_interrupt_in_a_child_is_resumed_through_the_engine(
    request: pytest.FixtureRequest,
    server: AnthropicServer,
    log_dir: Path,
    engine: str,
    loop: str,
    answer_with: Any,
    kind: str,
) -> None:
    """The child asks (its approval machine, its tool's question): the workflow waits
    with the child's question; the answer through the engine's client (Temporal's
    ``resume`` update, ``DBOSLoopClient.resume``) lands in the child, and the run ends
    with the in-process history; nothing ran twice."""
    expected = in_process(loop, log_dir.parent / "in-process", answer_with)
    state, interrupt, events = resumed_on(engine, request, server, log_dir, loop, answer_with)
    assert_resumed_in_the_child(kind, interrupt, state, expected, events, server, log_dir)


SURVEY_ASKED = Counter(
    ["survey Lisbon 0", "survey Porto 0", "survey Faro 0", "survey Porto 1", "oversee 0"]
)
"""The model calls of the fan-out resumed once: each branch's first, Porto's second
(after its call ran), the loop's."""


@pytest.mark.parametrize("engine", ["temporal", "dbos"])
def test_a_fan_out_branchs_approval_is_resumed_in_that_branch(
    request: pytest.FixtureRequest,
    server: AnthropicServer,
    log_dir: Path,
    engine: str,
) -> None:
    """Of three branches the middle one (Porto) asks for approval: the workflow waits on
    that question (path ``web#2``) once the other two have answered; the answer through
    the engine's client lands in Porto, which runs its call and answers; Lisbon and
    Faro are not asked again, and the run ends with the in-process history and notes."""
    expected = in_process("survey", log_dir.parent / "in-process", True)
    state, interrupt, events = resumed_on(engine, request, server, log_dir, "survey", True)
    assert (interrupt.kind, interrupt.state, interrupt.path, interrupt.tool_use_ids) == (
        "approval",
        "survey",
        "web#2",
        ("toolu_s2",),
    )
    assert histories(state) == histories(expected)
    assert state.history[0].text == (
        "go[web#1] Lisbon: sunny.\n[web#2] Porto: looked at Porto.\n[web#3] Faro: sunny."
    )
    assert state.notes == expected.notes
    assert "children.runs" not in state.notes
    found = ends(events)
    assert sorted(found[:3]) == [
        ("web#1", "model_complete"),
        ("web#2", "suspended"),
        ("web#3", "model_complete"),
    ]
    assert found[3:] == [("", "suspended"), ("web#2", "model_complete"), ("", "model_complete")]
    assert asked_by_city(server) == SURVEY_ASKED
    assert [c for _, c in tool_starts(log_dir)] == ["toolu_s2"]


@pytest.mark.parametrize("engine", ["temporal", "dbos"])
@pytest.mark.parametrize(("kind", "answer_with", "result"), [
    ("approval", True, "Done: looked at bin."),
    ("question", "blue", "Done: blue."),
])  # fmt: skip
def test_an_agent_tools_child_asking_is_resumed_in_the_tool_call(
    request: pytest.FixtureRequest,
    server: AnthropicServer,
    log_dir: Path,
    engine: str,
    kind: str,
    answer_with: Any,
    result: str,
) -> None:
    """The agent tool's child asks (its approval machine, its tool's question): the
    workflow waits in ``execute`` on the child's question (path ``helper[toolu_h1]``);
    the answer lands in the child, whose answer becomes the tool call's result; each
    model call and tool call ran once, and the history is the in-process one."""
    loop = f"agent-{kind}"
    expected = in_process(loop, log_dir.parent / "in-process", answer_with)
    state, interrupt, events = resumed_on(engine, request, server, log_dir, loop, answer_with)
    assert (interrupt.kind, interrupt.state, interrupt.path, interrupt.tool_use_ids) == (
        kind,
        "execute",
        "helper[toolu_h1]",
        ("toolu_c1",),
    )
    assert histories(state) == histories(expected)
    assert state.history[-1].text == f"So: {result}"
    assert ends(events) == [
        ("helper[toolu_h1]", "suspended"),
        ("", "suspended"),
        ("helper[toolu_h1]", "model_complete"),
        ("", "model_complete"),
    ]
    agent = "clean" if kind == "approval" else "ask"
    assert asked(server) == Counter(
        {"consult 0": 1, f"{agent} 0": 1, f"{agent} 1": 1, "consult 1": 1}
    )
    assert [c for _, c in tool_starts(log_dir)] == ["toolu_c1"]


def test_worker_killed_while_a_branch_waits_recovers_the_fan_out(
    procs: Processes, tmp_path: Path, server: AnthropicServer, log_dir: Path
) -> None:
    """kill -9 the DBOS worker (SQLite) while the fan-out waits on Porto's approval; a
    new worker recovers the workflow, which replays its branches' recorded calls (none
    is made again) and waits again; the answer lands in Porto, and the run ends with
    the in-process history."""
    expected = in_process("survey", tmp_path / "in-process", True)
    url = dbos_sqlite(tmp_path)
    env = {"INNERLOOP_TEST_DIR": str(log_dir), "INNERLOOP_TEST_LOOPBACK": server.base_url}

    async def main() -> tuple[Any, Interrupt, int]:
        w1 = await asyncio.to_thread(spawn_dbos_worker, procs, "w1", url, env, NESTED_APP)
        client = DBOSClient(system_database_url=url)
        try:
            loops = DBOSLoopClient(client)
            await loops.start("survey", "go", id="survey-crash")
            interrupt = await asyncio.wait_for(dbos_suspended(loops, "survey-crash"), 60)
            procs.kill9(w1)
            w2 = await asyncio.to_thread(spawn_dbos_worker, procs, "w2", url, env, NESTED_APP)
            await loops.resume("survey-crash", True)
            state = await asyncio.wait_for(loops.result("survey-crash"), 60)
            return state, interrupt, w2.pid
        finally:
            client.destroy()

    state, interrupt, successor = asyncio.run(main())
    assert (interrupt.path, interrupt.tool_use_ids) == ("web#2", ("toolu_s2",))
    assert histories(state) == histories(expected)
    assert state.notes == expected.notes
    assert asked_by_city(server) == SURVEY_ASKED
    assert tool_starts(log_dir) == [(successor, "toolu_s2")]


def test_two_asking_branches_are_asked_one_at_a_time_in_a_temporal_workflow(
    temporal_server: TemporalServer, server: AnthropicServer, log_dir: Path
) -> None:
    """Lisbon's and Faro's branches ask: the workflow waits on Lisbon's (``web#1``);
    answered (denied), it waits again on Faro's (``web#3``) without running Porto or
    Lisbon's first call again; answered, the run ends with the in-process history."""
    tmp = log_dir.parent / "in-process"
    tmp.mkdir()
    with AnthropicServer(respond=answer) as own, pytest.MonkeyPatch.context() as mp:
        mp.setenv("INNERLOOP_TEST_DIR", str(tmp))
        d = nested_app(own.base_url).get("survey-twice")
        harness = Harness(d.params, d.providers, machine=d.machine)
        expected = harness.run_sync("go")
        asked = expected.interrupt
        assert asked is not None  # two branches wait: the answer names the question
        expected = harness.resume(expected, Answer(asked.id, False)).run_sync()
        expected = harness.resume(expected, True).run_sync()
    assert expected.exit_reason == "model_complete"

    async def body(loops: TemporalLoops) -> tuple[Any, list[Interrupt]]:
        handle = await loops.start("survey-twice", "go", id="survey-twice")
        first = await temporal_suspended(handle)
        await handle.resume(Answer(first.id, False))
        while (second := await temporal_suspended(handle)).path == first.path:  # noqa: ASYNC110
            await asyncio.sleep(0.05)  # the first question until the workflow goes on
        await handle.resume(True)
        return await handle.result(), [first, second]

    state, asked_on = on_temporal(temporal_server, server, "survey-twice", body)
    assert [(i.path, i.tool_use_ids) for i in asked_on] == [
        ("web#1", ("toolu_s1",)),
        ("web#3", ("toolu_s3",)),
    ]
    assert histories(state) == histories(expected)
    assert state.history[0].text == (
        "go[web#1] Lisbon: denied by the user.\n[web#2] Porto: sunny.\n"
        "[web#3] Faro: looked at Faro."
    )
    branches = ["Lisbon 0", "Porto 0", "Faro 0", "Lisbon 1", "Faro 1"]
    assert asked_by_city(server) == Counter([*(f"survey twice {b}" for b in branches), "oversee 0"])
    assert [c for _, c in tool_starts(log_dir)] == ["toolu_s3"]
