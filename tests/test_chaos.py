"""The chaos campaign (``tests/chaos_runner.py``): its 300-run slice, and its checks, which
must see a broken invariant when there is one."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import struct
import subprocess
import sys
import time
import warnings
from pathlib import Path

import attrs
import pytest

from innerloop import Harness
from innerloop._events import Backoff, Transition
from innerloop._messages import Message, TextBlock, ToolUseBlock
from innerloop.fsm._default import DEFAULT_SPEC
from innerloop.testing import TransitionCoverage, reply
from tests.chaos_runner import (
    ANTHROPIC_KEY,
    Board,
    ChaosStep,
    Exhausted,
    Noise,
    Outcome,
    Plan,
    Report,
    busy_processes,
    check_run,
    descendants,
    leftovers,
    listening,
    plan,
    run_campaign,
)


def test_300_seeded_runs_break_nothing(transition_coverage: TransitionCoverage) -> None:
    """Every run of seeds 0-299 keeps every invariant, and the slice goes down every
    recovery route by runs whose path does not depend on timing (aborts aimed at a state
    or an event count, no call or tool late on a loaded machine). Its speed is for
    bench/chaos.py to measure: on a loaded machine the slice takes minutes."""
    report = run_campaign(300, seed=0, jobs=32, observers=(transition_coverage,))
    assert report.runs == 300
    assert report.breaks == [], report.summary(first=10)
    # the slice reaches every way a run ends, and host aborts fire
    assert set(report.exits) == {
        "model_complete",
        "tasks_complete",
        "max_turns_exceeded",
        "budget_exceeded",
        "aborted",
        "failed",
    }, report.summary()
    assert report.aborts > 0
    taken = set(report.routes)
    routes = {
        ("call", "backoff"),
        ("stream", "backoff"),
        ("call", "fallback"),
        ("stream", "fallback"),
        ("fallback", "normalize"),
        ("call", "compact"),
        ("stream", "compact"),
        ("compact", "abort"),
        ("call", "call"),
        ("stream", "call"),
        ("execute", "abort"),
        ("abort", "aborted"),
        ("abort", "failed"),
    }
    assert routes <= taken, routes - taken
    assert taken <= {(t.source, t.target) for t in DEFAULT_SPEC.transitions}


def test_a_plan_depends_on_its_seed_alone() -> None:
    """The same seed plans the same run; another seed, another run."""
    assert plan(7) == plan(7)
    assert plan(7) != plan(8)


@pytest.fixture(scope="module")
def kept() -> Report:
    """A few clean runs, kept to be tampered with."""
    report = run_campaign(12, seed=40, jobs=4, keep=True)
    assert report.breaks == [], report.summary()
    return report


def _finished(kept: Report) -> tuple[object, ...]:
    """A run that ended model_complete, with a copy of its state to spoil."""
    for outcome, p, harness in kept.outcomes.values():
        if outcome.state.exit_reason == "model_complete" and not outcome.abort_fired:
            state = attrs.evolve(outcome.state, history=list(outcome.state.history))
            return attrs.evolve(outcome, state=state), p, harness
    raise AssertionError("no run of the kept slice ended model_complete")


class TestCheckRun:
    def test_a_key_in_the_state_is_a_break(self, kept: Report) -> None:
        """A history quoting the key breaks the no-key invariant."""
        outcome, p, harness = _finished(kept)
        outcome.state.history += [Message.user(f"my key is {ANTHROPIC_KEY}")]  # type: ignore[attr-defined]
        assert "an API key in the state" in check_run(outcome, p, harness)  # type: ignore[arg-type]

    def test_an_unanswered_tool_call_is_a_break(self, kept: Report) -> None:
        """An assistant tool call with no result after it breaks the history invariant."""
        outcome, p, harness = _finished(kept)
        outcome.state.history += [  # type: ignore[attr-defined]
            Message.user("again"),
            Message("assistant", (TextBlock("hm"), ToolUseBlock("toolu_x", "lookup", {}))),
        ]
        problems = check_run(outcome, p, harness)  # type: ignore[arg-type]
        assert any("'toolu_x'" in problem and "no tool_result" in problem for problem in problems)

    def test_a_turn_counted_twice_is_a_break(self, kept: Report) -> None:
        """A turn counter off by one breaks the counters invariant."""
        outcome, p, harness = _finished(kept)
        outcome.state.turns += 1  # type: ignore[attr-defined]
        problems = check_run(outcome, p, harness)  # type: ignore[arg-type]
        assert any(problem.startswith("turns ") for problem in problems), problems

    def test_a_wrong_exit_reason_is_a_break(self, kept: Report) -> None:
        """An exit_reason that is not its final state's breaks the final-state invariant."""
        outcome, p, harness = _finished(kept)
        outcome.state.exit_reason = "tasks_complete"  # type: ignore[attr-defined]
        assert (
            "exit_reason 'tasks_complete' does not match final state 'model_complete'"
            in check_run(outcome, p, harness)  # type: ignore[arg-type]
        )

    def test_a_clean_run_has_no_problem(self, kept: Report) -> None:
        """Untouched, the same run keeps every invariant."""
        outcome, p, harness = _finished(kept)
        assert check_run(outcome, p, harness) == []  # type: ignore[arg-type]


def test_a_process_left_behind_is_found_by_its_slot() -> None:
    """A process with the slot's marker in its environment is a leftover of that slot."""
    env = {**os.environ, "CHAOS_RUN": "slot-test"}
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], env=env)
    try:
        found = asyncio.run(leftovers("slot-test", grace=0.1))
        assert [pid for pid, _ in found] == [child.pid]
        assert descendants("slot-other") == []
    finally:
        child.kill()
        child.wait()
    assert descendants("slot-test") == []


def test_a_warning_is_heard() -> None:
    """A warning raised while listening is drained as noise, and only once."""
    noise = Noise()
    with listening(noise):
        warnings.warn("socket left open", ResourceWarning, stacklevel=1)
    assert noise.drain() == ["warning ResourceWarning: socket left open"]
    assert noise.drain() == []


# -- bugs the campaign found --------------------------------------------------------------


def test_an_abort_right_after_message_complete_keeps_the_model_response() -> None:
    """Seeds 1999, 3930, 4099, 4177: a host aborting as it reads ``message_complete``
    cut off the ``model_response`` of a turn already counted in ``state.turns``."""
    from innerloop import Harness, HarnessParams
    from innerloop.testing import FakeClock, ScriptedProvider, reply

    async def main() -> tuple[list[str], int, str | None]:
        provider = ScriptedProvider([reply("hello")])
        params = HarnessParams(model="scripted:model-20250101")
        run = Harness(params, [provider], clock=FakeClock()).start("hi")
        seen: list[str] = []
        async for event in run.events():
            seen.append(event.type)
            if event.type == "message_complete":
                run.abort("the host has read enough")
        return seen, run.state.turns, run.state.exit_reason

    seen, turns, exit_reason = asyncio.run(main())
    assert seen[seen.index("message_complete") :] == [
        "message_complete",
        "model_response",
        "transition",
        "abort",
        "transition",
        "finished",
    ]
    assert (turns, exit_reason) == (1, "aborted")


def _with_extra_call(
    kept: Report, error: str, served: tuple[ChaosStep, ...] = ()
) -> tuple[Outcome, Plan, Harness]:
    """A clean run, plus one more call that counted transient with ``error``, and
    ``served`` steps taken for it."""
    outcome, p, harness = _finished(kept)
    state = outcome.state  # type: ignore[attr-defined]
    errors = {**state.errors, "transient": state.errors.get("transient", 0) + 1}
    spoiled = attrs.evolve(
        outcome,  # type: ignore[misc]
        state=attrs.evolve(state, errors=errors),
        events=[Transition("normalize", "call", None), *outcome.events],  # type: ignore[attr-defined]
        served=[*outcome.served, *served],  # type: ignore[attr-defined]
        errors=[*outcome.errors, error],  # type: ignore[attr-defined]
    )
    return spoiled, p, harness  # type: ignore[return-value]


TIMED_OUT_SDK = "openai_sdk transient: APITimeoutError: Request timed out."
TIMED_OUT_WIRE = "anthropic_wire transient: ReadTimeout: no data from the server for 3 s"


@pytest.mark.parametrize("error", [TIMED_OUT_SDK, TIMED_OUT_WIRE])
@pytest.mark.parametrize("served", [(), (reply("lost to the timeout"),)], ids=["unread", "read"])
def test_a_call_timed_out_on_a_loaded_machine_is_late_not_a_break(
    kept: Report, error: str, served: tuple[ChaosStep, ...]
) -> None:
    """Seed 5420 of the 10,000 under load: a call hit the 3 s HTTP timeout before the
    server read its request; the run rightly counted it transient, and the runner took
    the call the server never saw for one past the script (a fatal 400). Read or not, a
    timed-out call is late, and the run's other outcomes still match the steps served."""
    outcome, p, harness = _with_extra_call(kept, error, served)
    assert check_run(outcome, p, harness) == []
    assert outcome.late_calls == 1


@pytest.mark.parametrize(
    ("error", "served"),
    [
        ("openai_sdk transient: JSONDecodeError: Expecting value", ()),  # not a timeout
        (TIMED_OUT_SDK, (reply("one"), reply("two"))),  # one call, two steps lost
    ],
    ids=["no-timeout", "two-steps"],
)
def test_a_transient_the_steps_do_not_explain_is_a_break(
    kept: Report, error: str, served: tuple[ChaosStep, ...]
) -> None:
    """A transient that is no timeout, or a timeout taking the place of two outcomes,
    breaks the counters invariant."""
    outcome, p, harness = _with_extra_call(kept, error, served)
    problems = check_run(outcome, p, harness)
    assert any(problem.startswith("served ") for problem in problems), problems
    assert outcome.late_calls == 0


def test_a_call_past_the_script_is_served_as_exhausted() -> None:
    """The board records a call past a run's script, so it is not taken for a call the
    server never read; a late request of a run that has ended records nothing."""
    board = Board()
    board.put("chaos-run-1", [reply("only")])
    assert board.take("chaos-run-1") == reply("only")
    assert board.take("chaos-run-1") is None
    assert board.remove("chaos-run-1") == [reply("only"), Exhausted()]
    assert board.take("chaos-run-1") is None
    assert board.remove("chaos-run-1") == []


def test_a_backoff_ignoring_retry_after_is_a_break(kept: Report) -> None:
    """A backoff that does not wait the Retry-After breaks the backoff invariant."""
    outcome, p, harness = next(
        kept_run
        for kept_run in kept.outcomes.values()
        if not kept_run[0].abort_fired and any(isinstance(e, Backoff) for e in kept_run[0].events)
    )
    waits = [i for i, e in enumerate(outcome.events) if isinstance(e, Backoff)]
    events = list(outcome.events)
    events[waits[0]] = attrs.evolve(events[waits[0]], delay=123.0)  # type: ignore[misc]
    problems = check_run(attrs.evolve(outcome, events=events), p, harness)
    assert any(problem.startswith("backoff ") for problem in problems), problems


def test_a_loopback_server_stops_writing_to_a_client_that_reset(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Seed 9999 of the 10,000: a client that hung up (an abort) before its reply went
    out made the server write every remaining frame into the dead socket, and asyncio
    logged ``socket.send() raised exception.``"""
    from innerloop.testing import AnthropicServer, reply

    server = AnthropicServer()

    async def main() -> None:
        accepted: asyncio.Future[asyncio.StreamWriter] = asyncio.Future()
        listener = await asyncio.start_server(lambda r, w: accepted.set_result(w), "127.0.0.1", 0)
        port = listener.sockets[0].getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        writer = await accepted
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.close()  # a reset, as when the host aborts the call
        await asyncio.sleep(0.05)
        plan = server._events(server.frames(reply("x " * 400), "model"))
        assert len(plan.chunks) > 20
        with contextlib.suppress(ConnectionError):
            await server._send(writer, plan, True)
        writer.close()
        listener.close()
        await listener.wait_closed()

    with caplog.at_level(logging.WARNING, logger="asyncio"):
        asyncio.run(main())
    assert [r.getMessage() for r in caplog.records] == []


def test_busy_processes_stop_by_themselves() -> None:
    """``bench/chaos.py --load N``: each busy process spins until its bound, then exits
    by itself (0); the block's end stops the ones still spinning."""
    with busy_processes(2, 0.2) as procs:
        assert [proc.wait(timeout=30) for proc in procs] == [0, 0]
    with busy_processes(1, 60) as (spinning,):
        assert spinning.poll() is None
    assert spinning.returncode == -signal.SIGTERM


def test_busy_processes_stop_when_their_parent_is_gone() -> None:
    """A busy process whose campaign died (killed, no clean-up) stops by itself."""
    code = (
        "import os, sys; from tests.chaos_runner import busy_processes\n"
        "with busy_processes(1, 60) as (proc,):\n"
        "    print(proc.pid, flush=True); os._exit(0)\n"
    )
    parent = subprocess.run(
        [sys.executable, "-c", code],
        cwd=Path(__file__).resolve().parent.parent,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    pid = int(parent.stdout)
    deadline = time.monotonic() + 30
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid)


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie or a reused pid does not: its command is checked)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z" and b"deadline, parent" in cmdline
