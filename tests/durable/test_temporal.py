"""Temporal: loops run as workflows on a real dev server, with real worker processes."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from temporalio.client import Client

from innerloop import Answer, ResumeError
from innerloop.durable.temporal import (
    TemporalLoopHandle,
    TemporalLoops,
    TemporalOptions,
    temporal_worker,
)
from innerloop.fsm import Interrupt
from innerloop.testing import assert_valid_history, replay
from innerloop.tools._runner import ABORTED_TOOL
from tests.durable import app as test_app
from tests.durable._checks import (
    APPROVAL_REFUSED,
    assert_each_run_replays,
    assert_only_call_1_reran,
    model_turns,
    started,
    tool_starts,
    until,
)
from tests.durable._procs import Processes, TemporalServer, spawn_temporal_worker
from tests.durable.conftest import resumed_in_process

T = TypeVar("T")


def in_process_worker(
    server: TemporalServer, queue: str, body: Callable[[TemporalLoops], Awaitable[T]], **opts: Any
) -> T:
    """Run ``body`` with a worker for ``queue`` in this process."""

    async def main() -> T:
        client = await Client.connect(server.address)
        options = TemporalOptions(heartbeat_timeout=2, **opts)
        async with temporal_worker(client, test_app.app, task_queue=queue, options=options):
            return await asyncio.wait_for(body(TemporalLoops(client, queue)), 60)

    return asyncio.run(main())


def follow(
    server: TemporalServer, workflow_id: str, **opts: Any
) -> tuple[Any, list[dict[str, Any]]]:
    """Start the ``tools`` loop as ``workflow_id`` with an in-process worker, read all its
    events, return its final state and the events."""

    async def body(loops: TemporalLoops) -> tuple[Any, list[dict[str, Any]]]:
        handle = await loops.start("tools", "go", id=workflow_id)
        events = [e async for e in handle.events(poll=0.05)]
        return await handle.result(), events

    return in_process_worker(server, workflow_id, body, **opts)


def test_loop_runs_as_workflow_with_the_in_process_history(
    temporal_server: TemporalServer, log_dir: Path, expected_history: list[dict[str, Any]]
) -> None:
    """A workflow run gives the in-process history; each step runs once; events arrive."""
    state, events = follow(temporal_server, "happy")
    assert [m.to_dict() for m in state.history] == expected_history
    assert state.exit_reason == "model_complete"
    assert model_turns(log_dir) == Counter({"0": 1, "1": 1, "2": 1, "3": 1})
    assert [c for _, c in tool_starts(log_dir)] == ["call_0", "call_1", "call_2"]
    assert [e["type"] for e in events].count("tool_executed") == 3
    assert events[-1]["type"] == "finished"
    assert events[-1]["exit_reason"] == "model_complete"
    assert replay(events).assert_same().calls == 4  # the run the workflow recorded


@pytest.mark.parametrize("poll", [0.05, 1.0])
def test_continue_as_new_carries_the_state(
    temporal_server: TemporalServer,
    log_dir: Path,
    expected_history: list[dict[str, Any]],
    poll: float,
) -> None:
    """With a tiny history limit the loop continues as new each turn and ends the same;
    a host that polls less often than the loop continues as new still gets every event
    (the events it has not acknowledged move on to the next run)."""

    async def body(loops: TemporalLoops) -> tuple[Any, list[dict[str, Any]], int]:
        handle = await loops.start("tools", "go", id=f"can-{poll}")
        events = [e async for e in handle.events(poll=poll)]
        state = await handle.result()
        desc = await loops.client.get_workflow_handle(f"can-{poll}").describe()
        return state, events, desc.raw_description.workflow_execution_info.history_length

    state, events, length = in_process_worker(
        temporal_server, f"can-{poll}", body, max_history_events=10
    )
    assert [m.to_dict() for m in state.history] == expected_history
    assert model_turns(log_dir) == Counter({"0": 1, "1": 1, "2": 1, "3": 1})
    types = [e["type"] for e in events]
    assert types.count("model_response") == 4
    assert types.count("tool_executed") == 3
    assert types[-1] == "finished"
    assert length < 40
    assert assert_each_run_replays(events)[-1] == "model_complete"


def test_rate_limit_backoff_is_a_durable_timer(
    temporal_server: TemporalServer,
    log_dir: Path,
    expected_history: list[dict[str, Any]],
    monkeypatch: Any,
) -> None:
    """A 429 is a step result: the machine backs off (Retry-After 0.5 s) and retries once;
    Temporal does not retry it on its own."""
    monkeypatch.setenv("INNERLOOP_TEST_429_AT", "1")
    state, events = follow(temporal_server, "backoff")
    assert [m.to_dict() for m in state.history] == expected_history
    assert model_turns(log_dir) == Counter({"0": 1, "1": 2, "2": 1, "3": 1})
    backoffs = [e for e in events if e["type"] == "backoff"]
    assert [(b["attempt"], b["delay"]) for b in backoffs] == [(1, 0.5)]
    assert state.total_wait == 0.5
    assert replay(events).assert_same().calls == 5  # the 429 included


def test_abort_signal_cancels_the_tool_in_flight(
    temporal_server: TemporalServer, log_dir: Path
) -> None:
    """The abort signal ends the loop while a tool runs and cancels the tool's activity;
    the call gets the result of a cancelled call, and the recorded run replays."""
    (log_dir / "hold-1").touch()

    async def body(loops: TemporalLoops) -> tuple[Any, list[dict[str, Any]]]:
        handle = await loops.start("tools", "go", id="abort")
        await until(started(log_dir, "call_1"), what="call_1 to start")
        await handle.abort("the host said stop")
        state = await asyncio.wait_for(handle.result(), 30)
        await until(
            lambda: "cancelled call_1" in (log_dir / "tool.log").read_text(),
            what="the tool to be cancelled",
        )
        return state, [e async for e in handle.events(poll=0.05)]

    state, events = in_process_worker(temporal_server, "abort", body)
    assert assert_each_run_replays(events) == ["aborted"]
    assert state.exit_reason == "aborted"
    assert state.abort.reason == "the host said stop"
    assert state.history[-2].tool_uses[0].id == "call_1"
    (closing,) = state.history[-1].tool_results
    assert (closing.tool_use_id, closing.is_error) == ("call_1", True)
    assert closing.content == ABORTED_TOOL  # cancelled, as in process: not a lost step
    assert_valid_history(state.history)
    assert "end call_1" not in (log_dir / "tool.log").read_text()


async def steps_seen(handle: TemporalLoopHandle) -> int:
    """How many completed steps the workflow has read (a workflow task ran after them)."""
    history = await handle.handle.fetch_history()
    completed = seen = 0
    for event in history.events:
        if event.HasField("activity_task_completed_event_attributes"):
            completed += 1
        elif event.HasField("workflow_task_completed_event_attributes"):
            seen = completed
    return seen


def test_abort_in_a_batch_keeps_the_finished_calls(
    temporal_server: TemporalServer, log_dir: Path
) -> None:
    """The abort comes once two calls of a batch of three have finished (and the workflow
    has their results): they keep them, the third call's activity is cancelled, and the
    recorded run replays."""
    (log_dir / "hold-12").touch()

    async def body(loops: TemporalLoops) -> tuple[Any, list[dict[str, Any]]]:
        handle = await loops.start("batch", "go", id="abort-batch")
        await until(started(log_dir, "call_c"), what="call_c to start")
        while await steps_seen(handle) < 3:  # noqa: ASYNC110  the model call, call_a, call_b
            await asyncio.sleep(0.05)
        await handle.abort("the host said stop")
        state = await asyncio.wait_for(handle.result(), 30)
        return state, [e async for e in handle.events(poll=0.05)]

    state, events = in_process_worker(temporal_server, "abort-batch", body)
    assert assert_each_run_replays(events) == ["aborted"]
    results = [(r.tool_use_id, r.content) for r in state.history[-1].tool_results]
    assert results == [("call_a", "worked 10"), ("call_b", "worked 11"), ("call_c", ABORTED_TOOL)]
    executed = [e["tool_use_id"] for e in events if e["type"] == "tool_executed"]
    assert executed == ["call_a", "call_b"]
    assert_valid_history(state.history)


def test_worker_killed_mid_tool_resumes_on_a_new_worker(
    temporal_server: TemporalServer,
    procs: Processes,
    log_dir: Path,
    expected_history: list[dict[str, Any]],
) -> None:
    """kill -9 during a tool step; a new worker finishes with the same messages and only
    the tool call in flight runs twice."""
    (log_dir / "hold-1").touch()
    env = {"INNERLOOP_TEST_DIR": str(log_dir)}
    address = temporal_server.address

    async def main() -> tuple[Any, list[dict[str, Any]], int, int]:
        w1 = await asyncio.to_thread(spawn_temporal_worker, procs, "w1", address, "crash", env)
        client = await Client.connect(address)
        handle = await TemporalLoops(client, "crash").start("tools", "go", id="crash")
        await until(started(log_dir, "call_1"), what="call_1 to start")
        procs.kill9(w1)
        w2 = await asyncio.to_thread(spawn_temporal_worker, procs, "w2", address, "crash", env)
        (log_dir / "hold-1").unlink()
        state = await asyncio.wait_for(handle.result(), 60)
        events = [e async for e in handle.events(poll=0.05)]
        return state, events, w1.pid, w2.pid

    state, events, pid1, pid2 = asyncio.run(main())
    assert assert_each_run_replays(events) == ["model_complete"]
    assert [m.to_dict() for m in state.history] == expected_history
    assert model_turns(log_dir) == Counter({"0": 1, "1": 1, "2": 1, "3": 1})
    assert_only_call_1_reran(log_dir, pid1, pid2)


def test_worker_killed_mid_model_call_reruns_only_that_call(
    temporal_server: TemporalServer,
    procs: Processes,
    log_dir: Path,
    expected_history: list[dict[str, Any]],
) -> None:
    """kill -9 while the model streams turn 2: only that model call runs again."""
    (log_dir / "hold-model-2").touch()
    env = {"INNERLOOP_TEST_DIR": str(log_dir)}
    address = temporal_server.address

    async def main() -> tuple[Any, list[dict[str, Any]]]:
        w1 = await asyncio.to_thread(spawn_temporal_worker, procs, "m1", address, "mid", env)
        client = await Client.connect(address)
        handle = await TemporalLoops(client, "mid").start("tools", "go", id="mid-model")
        await until(lambda: model_turns(log_dir)["2"] == 1, what="model turn 2 to start")
        procs.kill9(w1)
        await asyncio.to_thread(spawn_temporal_worker, procs, "m2", address, "mid", env)
        (log_dir / "hold-model-2").unlink()
        state = await asyncio.wait_for(handle.result(), 60)
        return state, [e async for e in handle.events(poll=0.05)]

    state, events = asyncio.run(main())
    assert assert_each_run_replays(events) == ["model_complete"]
    assert [m.to_dict() for m in state.history] == expected_history
    assert model_turns(log_dir) == Counter({"0": 1, "1": 1, "2": 2, "3": 1})
    assert [c for _, c in tool_starts(log_dir)] == ["call_0", "call_1", "call_2"]


def test_server_killed_and_restarted(
    procs: Processes, tmp_path: Path, log_dir: Path, expected_history: list[dict[str, Any]]
) -> None:
    """kill -9 the server mid-tool and start it again on its database: the loop finishes
    with the same messages; completed steps ran once."""
    server = TemporalServer(procs, tmp_path / "own.db")
    server.start()
    (log_dir / "hold-1").touch()
    env = {"INNERLOOP_TEST_DIR": str(log_dir)}

    async def main() -> Any:
        await asyncio.to_thread(spawn_temporal_worker, procs, "w", server.address, "srv", env)
        client = await Client.connect(server.address)
        await TemporalLoops(client, "srv").start("tools", "go", id="srv")
        await until(started(log_dir, "call_1"), what="call_1 to start")
        server.kill9()
        await asyncio.to_thread(server.start)
        (log_dir / "hold-1").unlink()
        client = await Client.connect(server.address)
        return await asyncio.wait_for(client.get_workflow_handle("srv").result(), 90)

    from innerloop.durable import state_from_dict

    state = state_from_dict(asyncio.run(main()))
    assert [m.to_dict() for m in state.history] == expected_history
    assert model_turns(log_dir) == Counter({"0": 1, "1": 1, "2": 1, "3": 1})
    starts = Counter(c for _, c in tool_starts(log_dir))
    assert starts["call_0"] == 1
    assert starts["call_2"] == 1
    assert 1 <= starts["call_1"] <= 2


def test_two_workers_one_dies(
    temporal_server: TemporalServer,
    procs: Processes,
    log_dir: Path,
    expected_history: list[dict[str, Any]],
) -> None:
    """Four loops over two workers; one worker is killed mid-tool; the other finishes all
    four with the same messages, re-running only the tool calls that were in flight."""
    (log_dir / "hold-1").touch()
    env = {"INNERLOOP_TEST_DIR": str(log_dir)}
    address = temporal_server.address
    ids = [f"pair-{i}" for i in range(4)]

    async def main() -> tuple[list[Any], list[list[dict[str, Any]]], int]:
        wa = await asyncio.to_thread(spawn_temporal_worker, procs, "wa", address, "pair", env)
        await asyncio.to_thread(spawn_temporal_worker, procs, "wb", address, "pair", env)
        client = await Client.connect(address)
        loops = TemporalLoops(client, "pair")
        handles = [await loops.start("tools", "go", id=i) for i in ids]
        await until(
            lambda: sum(c == "call_1" for _, c in tool_starts(log_dir)) == 4,
            what="every loop to reach call_1",
        )
        procs.kill9(wa)
        (log_dir / "hold-1").unlink()
        results = await asyncio.wait_for(asyncio.gather(*(h.result() for h in handles)), 90)
        streams = [[e async for e in h.events(poll=0.05)] for h in handles]
        return list(results), streams, wa.pid

    states, streams, dead = asyncio.run(main())
    for events in streams:
        assert assert_each_run_replays(events) == ["model_complete"]
    for state in states:
        assert [m.to_dict() for m in state.history] == expected_history
    assert model_turns(log_dir) == Counter({"0": 4, "1": 4, "2": 4, "3": 4})
    starts = tool_starts(log_dir)
    in_flight_on_dead = sum(1 for pid, c in starts if pid == dead and c == "call_1")
    assert in_flight_on_dead >= 1, "the dead worker held none of the loops' tool calls"
    count = Counter(c for _, c in starts)
    assert count == Counter({"call_0": 4, "call_1": 4 + in_flight_on_dead, "call_2": 4})


async def suspended(handle: TemporalLoopHandle) -> Interrupt:
    """Poll until the loop waits suspended; its interrupt."""
    while (interrupt := await handle.interrupt()) is None:  # noqa: ASYNC110  a query
        await asyncio.sleep(0.05)
    return interrupt


@pytest.mark.parametrize(
    ("loop", "answer", "kind"),
    [
        ("approval", True, "approval"),
        ("approval", {"call_c": False}, "approval"),
        ("question", "blue", "question"),
    ],
)
def test_suspended_loop_resumes_on_the_update(
    temporal_server: TemporalServer, log_dir: Path, loop: str, answer: Any, kind: str
) -> None:
    """The run suspends, its workflow waits, and the ``resume`` update's answer takes it
    to the end with the history of the same run resumed in process."""
    expected = resumed_in_process(loop, answer, log_dir / "in-process")

    async def body(loops: TemporalLoops) -> tuple[Any, Interrupt, list[dict[str, Any]]]:
        handle = await loops.start(loop, "go", id=f"resume-{loop}-{answer!r}")
        interrupt = await suspended(handle)
        await handle.resume(answer)
        state = await handle.result()
        return state, interrupt, [e async for e in handle.events(poll=0.05)]

    state, interrupt, events = in_process_worker(
        temporal_server, f"resume-{loop}-{answer!r}", body
    )
    assert interrupt.kind == kind
    assert interrupt.tool_use_ids == ("call_c",)
    assert [m.to_dict() for m in state.history] == expected
    assert state.exit_reason == "model_complete"
    assert state.interrupt is None
    finished = [e["exit_reason"] for e in events if e["type"] == "finished"]
    assert finished == ["suspended", "model_complete"]
    assert assert_each_run_replays(events) == finished


def test_wrong_answer_is_refused_and_the_loop_keeps_waiting(
    temporal_server: TemporalServer, log_dir: Path
) -> None:
    """An answer of the wrong shape, or for another interrupt, raises ResumeError with the
    in-process message (the workflow checks the id); the workflow keeps waiting and takes
    a right answer after it, by the interrupt's id; once it has ended, an answer is
    refused too."""
    expected = resumed_in_process("approval", True, log_dir / "in-process")

    async def body(loops: TemporalLoops) -> tuple[Any, list[str]]:
        handle = await loops.start("approval", "go", id="wrong-answer")
        asked = await suspended(handle)
        errors = []
        for wrong in ("yes", {"call_x": True}, Answer("approve:9", True)):
            with pytest.raises(ResumeError) as info:
                await handle.resume(wrong)
            errors.append(str(info.value))
        assert await handle.interrupt() is not None
        await handle.resume(Answer(asked.id, True))
        state = await handle.result()
        with pytest.raises(ResumeError, match="run 'wrong-answer': its workflow takes no answer"):
            await handle.resume(True)
        return state, errors

    state, errors = in_process_worker(temporal_server, "wrong-answer", body)
    assert errors == [
        f"run 'wrong-answer': {APPROVAL_REFUSED}",
        "run 'wrong-answer': no verdict for 'call_c'; no pending call 'call_x'; an approval "
        "answer is True (run them all), False (deny them all) or {tool_use_id: bool} for "
        "'call_c'",
        "run 'wrong-answer': the answer is for interrupt 'approve:9', which it no longer "
        "waits on; it waits on 'approve:1' (approval: "
        + errors[2].split("(approval: ", 1)[1],
    ]
    assert [m.to_dict() for m in state.history] == expected


def test_worker_restart_while_suspended_still_resumes(
    temporal_server: TemporalServer, procs: Processes, log_dir: Path
) -> None:
    """kill -9 the worker while its loop waits suspended; a new worker replays the
    workflow and the answer takes it to the in-process history; nothing ran twice."""
    expected = resumed_in_process("question", "blue", log_dir / "in-process")
    env = {"INNERLOOP_TEST_DIR": str(log_dir)}
    address = temporal_server.address

    async def main() -> tuple[Any, list[dict[str, Any]]]:
        w1 = await asyncio.to_thread(spawn_temporal_worker, procs, "s1", address, "susp", env)
        client = await Client.connect(address)
        handle = await TemporalLoops(client, "susp").start("question", "go", id="susp")
        await asyncio.wait_for(suspended(handle), 30)
        procs.kill9(w1)
        await asyncio.to_thread(spawn_temporal_worker, procs, "s2", address, "susp", env)
        await asyncio.wait_for(handle.resume("blue"), 30)
        state = await asyncio.wait_for(handle.result(), 60)
        return state, [e async for e in handle.events(poll=0.05)]

    state, events = asyncio.run(main())
    assert assert_each_run_replays(events) == ["suspended", "model_complete"]
    assert [m.to_dict() for m in state.history] == expected
    assert model_turns(log_dir) == Counter({"0": 1, "1": 1})
    assert [c for _, c in tool_starts(log_dir)] == ["call_c"]


def test_suspend_timeout_ends_the_workflow_suspended(
    temporal_server: TemporalServer, log_dir: Path
) -> None:
    """With ``suspend_timeout`` the workflow waits that long, then ends in ``suspended``
    with the interrupt pending; the events end there."""

    async def body(loops: TemporalLoops) -> tuple[Any, list[dict[str, Any]]]:
        handle = await loops.start("approval", "go", id="timeout", suspend_timeout=0.5)
        state = await handle.result()
        return state, [e async for e in handle.events(poll=0.05)]

    state, events = in_process_worker(temporal_server, "timeout", body)
    assert state.exit_reason == "suspended"
    assert state.interrupt.kind == "approval"
    assert state.interrupt.answered is False
    assert events[-1]["type"] == "finished"
    assert events[-1]["exit_reason"] == "suspended"
    assert assert_each_run_replays(events) == ["suspended"]


def test_abort_while_suspended_closes_the_history(
    temporal_server: TemporalServer, log_dir: Path
) -> None:
    """The abort signal ends a waiting loop in ``aborted``; the pending call gets an
    error result and never runs."""

    async def body(loops: TemporalLoops) -> Any:
        handle = await loops.start("approval", "go", id="abort-suspended")
        await suspended(handle)
        await handle.abort("no one will answer")
        return await handle.result(), [e async for e in handle.events(poll=0.05)]

    state, events = in_process_worker(temporal_server, "abort-suspended", body)
    assert assert_each_run_replays(events) == ["suspended", "aborted"]
    assert state.exit_reason == "aborted"
    assert state.abort.reason == "no one will answer"
    (closing,) = state.history[-1].tool_results
    assert (closing.tool_use_id, closing.is_error) == ("call_c", True)
    assert_valid_history(state.history)
    assert tool_starts(log_dir) == []


def test_answer_to_a_running_loop_is_refused(
    temporal_server: TemporalServer, log_dir: Path, expected_history: list[dict[str, Any]]
) -> None:
    """A resume while the loop runs (not suspended) is refused and changes nothing."""
    (log_dir / "hold-1").touch()

    async def body(loops: TemporalLoops) -> tuple[Any, str]:
        handle = await loops.start("tools", "go", id="running")
        await until(started(log_dir, "call_1"), what="call_1 to start")
        with pytest.raises(ResumeError) as info:
            await handle.resume(True)
        (log_dir / "hold-1").unlink()
        return await handle.result(), str(info.value)

    state, error = in_process_worker(temporal_server, "running", body)
    assert error == (
        "run 'running': it is not waiting for an answer (it is running); resume a durable "
        "run while it is suspended (its interrupt says what it asks)"
    )
    assert [m.to_dict() for m in state.history] == expected_history
