"""DBOS adapter: a DBOS workflow drives the machine, the steps are DBOS steps.

DBOS records each step's output in its system database (SQLite by default, PostgreSQL for
several processes). After a crash, a worker started with the same executor id recovers its
unfinished workflows: the workflow function runs again from the top, completed steps
return their recorded outputs and the step that was running runs again. DBOS does not
notice a dead worker by itself; restart it (or run one worker per executor id under a
supervisor).

As with Temporal, steps never retry on their own (``retries_allowed=False``): a failed
model call is a recorded step *result* that the machine's recovery branches route. Backoff
sleeps are durable (``DBOS.sleep_async``). Events go to the DBOS stream ``events`` of the
workflow; an ``abort`` message sent to the workflow takes effect at the next turn boundary
of the run or of a child it runs (which is aborted, and then the run).

A run that suspends keeps its workflow open. The workflow publishes the interrupt as the
DBOS event ``interrupt`` (``{"n": the suspension's number, "interrupt": ...}``) and waits
in ``DBOS.recv`` on the topic ``resume`` (durable: no step runs, and a recovered workflow
waits again). :meth:`DBOSLoopClient.resume` checks the answer against that interrupt as
``Harness.resume`` does and refuses a wrong one before sending it; the workflow checks it
again (a message sent by other means), records a refusal as the event ``resume_refused``
and keeps waiting. After the input's ``suspend_timeout`` the workflow ends in
``suspended``.

A loop is one trace with its host: :meth:`DBOSLoopClient.start` puts the current
OpenTelemetry context in the workflow's input (``propagate.inject``), the workflow runs
under a ``innerloop.loop`` span of that trace (the run's own spans, from an
``innerloop.observe.Tracing`` observer of the :class:`LoopDefinition`, nest under it), and
each step gets the context in its arguments and runs under an ``innerloop.{step}`` span
(so the processes a tool starts get its ``TRACEPARENT``). A recovered workflow opens a new
``innerloop.loop`` span in the same trace; the steps it replays are not run, so they add
no span.
"""

from __future__ import annotations

import sqlite3
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

import attrs
from dbos import DBOS, DBOSClient, EnqueueOptions
from opentelemetry import propagate, trace
from opentelemetry.trace import Tracer, TracerProvider

from innerloop._errors import ResumeError
from innerloop._events import ChildEvent, Event, Transition
from innerloop._harness import Harness
from innerloop.durable._app import LoopApp, loop_input
from innerloop.durable._codec import state_from_dict, state_to_dict
from innerloop.durable._steps import COMPACTION, MODEL_CALL, TOOL_CALL
from innerloop.durable._suspend import (
    aborted_run,
    answer_from_wire,
    answer_to_wire,
    interrupt_from_dict,
    interrupt_to_dict,
    refuse_answer,
    resumed_run,
    start_run,
)
from innerloop.fsm._driver import Run
from innerloop.fsm._state import HarnessState, Interrupt

__all__ = ["DBOSClock", "DBOSLoopClient", "DBOSLoops", "dbos_config"]

WORKFLOW_NAME = "innerloop.loop"
EVENTS = "events"
ABORT = "abort"
RESUME = "resume"
INTERRUPT = "interrupt"
REFUSED = "resume_refused"
TRACE = "trace"
"""The key of the trace context (W3C headers) in a workflow's input and a step's args."""
_SCOPE = "innerloop.durable"
FOREVER = 10 * 365 * 24 * 3600.0
"""How long a suspended run waits when the input sets no ``suspend_timeout``."""


class DBOSClock:
    """Durable sleeps: a backoff survives a restart of the process."""

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await DBOS.sleep_async(max(seconds, 0.0))


def sqlite_problem(
    python: tuple[int, int] = (sys.version_info.major, sys.version_info.minor),
    sqlite: tuple[int, int, int] = sqlite3.sqlite_version_info,
) -> str | None:
    """Why DBOS cannot keep its system database in SQLite under this Python, or None. DBOS
    3 on Python 3.12 and later stamps rows with SQLite's ``unixepoch('subsec')``, which a
    SQLite before 3.42 reads as NULL (DBOS then fails ``NOT NULL constraint failed:
    application_versions.version_timestamp`` at launch)."""
    if python < (3, 12) or sqlite >= (3, 42, 0):
        return None
    return (
        f"DBOS on Python {python[0]}.{python[1]} needs SQLite 3.42 or later for a SQLite "
        f"system database (this Python's sqlite3 is {'.'.join(map(str, sqlite))}): use a "
        "postgresql:// database_url, or a Python built against a newer SQLite"
    )


def dbos_config(database_url: str, *, name: str = "innerloop", **extra: Any) -> Any:
    """A DBOS config for ``database_url`` (``sqlite:///path`` or ``postgresql://...``).

    Raises ``ValueError`` for a SQLite URL where DBOS cannot use SQLite (Python 3.12 or
    later with a SQLite before 3.42), saying what to use instead."""
    problem = sqlite_problem() if database_url.startswith("sqlite") else None
    if problem is not None:
        raise ValueError(problem)
    return {"name": name, "system_database_url": database_url, **extra}


class DBOSLoops:
    """Registers ``app``'s loop workflow and its three steps with DBOS. Create it once per
    process, before ``DBOS.launch()``; after it, :meth:`listen` takes loops from the queue
    ``queue``."""

    def __init__(
        self,
        app: LoopApp,
        *,
        queue: str = "innerloop",
        continue_at: Sequence[str] = ("assemble",),
        tracer_provider: TracerProvider | None = None,
    ) -> None:
        """``tracer_provider``: where the ``innerloop.loop`` and step spans go (the
        global one by default)."""
        self.app = app
        self.queue = queue
        tracer = trace.get_tracer(_SCOPE, tracer_provider=tracer_provider)
        steps = {
            name: self._step(app, name, tracer) for name in (MODEL_CALL, TOOL_CALL, COMPACTION)
        }

        async def call(name: str, args: dict[str, Any]) -> dict[str, Any]:
            carrier: dict[str, str] = {}
            propagate.inject(carrier)
            return await steps[name]({**args, TRACE: carrier})

        @DBOS.step(name="innerloop.now", retries_allowed=False)
        async def now() -> float:
            return time.time()

        @DBOS.workflow(name=WORKFLOW_NAME)
        async def loop_workflow(start: dict[str, Any]) -> dict[str, Any]:
            with tracer.start_as_current_span(
                "innerloop.loop",
                context=propagate.extract(start.get(TRACE) or {}),
                attributes={"innerloop.loop": start["loop"], "dbos.workflow_id": _workflow_id()},
            ):
                return await run_loop(start)

        async def run_loop(start: dict[str, Any]) -> dict[str, Any]:
            harness = app.harness(start["loop"], call, DBOSClock())
            run: Run | None = start_run(harness, start)
            limit = start.get("suspend_timeout") or FOREVER
            state, n = HarnessState(), 0
            while run is not None:
                await _drive(run, continue_at)
                state, run = run.state, None
                if state.final_state == "suspended":
                    n += 1
                    run = await _answered(harness, state, n, limit, now)
            await DBOS.close_stream_async(EVENTS)
            return state_to_dict(state)

        self.workflow = loop_workflow

    def listen(self) -> None:
        """Take loops from the queue; call after ``DBOS.launch()``."""
        DBOS.register_queue(self.queue)

    @staticmethod
    def _step(
        app: LoopApp, name: str, tracer: Tracer
    ) -> Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]:
        @DBOS.step(name=f"innerloop.{name}", retries_allowed=False)
        async def step(args: dict[str, Any]) -> dict[str, Any]:
            with tracer.start_as_current_span(
                f"innerloop.{name}",
                context=propagate.extract(args.get(TRACE) or {}),
                attributes={"dbos.workflow_id": _workflow_id()},
            ):
                return await app.execute(name, args)

        return step


def _workflow_id() -> str:
    return DBOS.workflow_id or ""


def _turn_boundary(event: Event, continue_at: Sequence[str]) -> bool:
    """Whether ``event`` enters a turn of the run or of one of its children."""
    if isinstance(event, ChildEvent):
        event = event.event
    return isinstance(event, Transition) and event.target in continue_at


async def _drive(run: Run, continue_at: Sequence[str]) -> None:
    """Drive ``run`` to a final state, its events to the stream; an abort message is
    read at each turn boundary, a child's too (the abort reaches the child)."""
    async for event in run.events():
        await DBOS.write_stream_async(EVENTS, event.to_dict())
        if _turn_boundary(event, continue_at):
            reason = await DBOS.recv_async(ABORT, timeout_seconds=0)
            if reason is not None:
                run.abort(str(reason))


async def _answered(
    harness: Harness,
    state: HarnessState,
    n: int,
    limit: float,
    now: Callable[[], Awaitable[float]],
) -> Run | None:
    """Wait (at most ``limit`` seconds) for the answer to suspension ``n``: the resumed
    run, or None."""
    assert state.interrupt is not None
    await DBOS.set_event_async(INTERRUPT, {"n": n, "interrupt": interrupt_to_dict(state.interrupt)})
    deadline = await now() + limit
    while (left := deadline - await now()) > 0:
        message = await DBOS.recv_async(RESUME, timeout_seconds=left)
        if message is None:
            break
        try:
            run = _resumed(harness, state, message, n)
        except ResumeError as exc:
            await DBOS.set_event_async(REFUSED, {"n": n, "error": str(exc)})
            continue
        await DBOS.set_event_async(INTERRUPT, None)
        return run
    await DBOS.set_event_async(INTERRUPT, None)  # the workflow ends: nothing takes an answer
    return None


def _resumed(harness: Harness, state: HarnessState, message: Any, n: int) -> Run | None:
    """The run after ``message`` (sent to the ``resume`` topic) for suspension ``n``."""
    if isinstance(message, Mapping) and "abort" in message:
        return aborted_run(harness, state, str(message["abort"]))
    if not isinstance(message, Mapping) or message.get("n") != n or "answer" not in message:
        raise ResumeError(
            DBOS.workflow_id,
            f"a resume message is {{'n': {n}, 'answer': ...}} (send it with "
            f"DBOSLoopClient.resume), not {message!r:.200}",
        )
    answer = answer_from_wire(message["answer"], str(message.get("interrupt") or ""))
    return resumed_run(harness, DBOS.workflow_id or "", state, answer)


@attrs.frozen
class DBOSLoopClient:
    """The host's side, from any process: start loops, read their events, abort them."""

    client: DBOSClient
    queue: str = "innerloop"

    async def start(
        self,
        loop: str,
        prompt: str | None = None,
        *,
        id: str,
        tasks: Sequence[str] = (),
        suspend_timeout: float | None = None,
    ) -> None:
        """Enqueue loop ``loop`` as workflow ``id``. ``suspend_timeout``: seconds a
        suspended run waits for :meth:`resume` before its workflow ends in ``suspended``
        (None: as long as it takes)."""
        options: EnqueueOptions = {
            "workflow_name": WORKFLOW_NAME,
            "queue_name": self.queue,
            "workflow_id": id,
        }
        carrier: dict[str, str] = {}
        propagate.inject(carrier)  # the host's trace, which the loop joins
        start = loop_input(
            loop, prompt, tasks=tasks, suspend_timeout=suspend_timeout, trace=carrier
        )
        await self.client.enqueue_async(options, start)

    async def result(self, id: str) -> HarnessState:
        handle: Any = await self.client.retrieve_workflow_async(id)
        return state_from_dict(await handle.get_result())

    async def events(self, id: str) -> AsyncIterator[dict[str, Any]]:
        async for event in self.client.read_stream_async(id, EVENTS):
            yield event

    async def abort(self, id: str, reason: str = "abort requested by the host") -> None:
        """End the loop: at its next turn while it runs, at once while it waits
        suspended (the pending tool calls get error results)."""
        await self.client.send_async(id, reason, ABORT)
        await self.client.send_async(id, {"abort": reason}, RESUME)

    async def _pending(self, id: str) -> dict[str, Any] | None:
        data: dict[str, Any] | None = await self.client.get_event_async(
            id, INTERRUPT, timeout_seconds=0
        )
        return data

    async def interrupt(self, id: str) -> Interrupt | None:
        """What the suspended run waits for, or None while it is not waiting."""
        pending = await self._pending(id)
        return interrupt_from_dict(pending["interrupt"]) if pending else None

    async def resume(self, id: str, answer: Any) -> None:
        """Answer the suspended run; it goes on in its workflow. An answer that does not
        fit (or a run that is not waiting, or an :class:`~innerloop.Answer` for another
        interrupt than the one it waits on) raises :class:`~innerloop.ResumeError`, and
        nothing is sent. The message carries the interrupt's id: the workflow takes it
        for that suspension only."""
        pending = await self._pending(id)
        state, asked = None, ""
        if pending is not None:
            interrupt = interrupt_from_dict(pending["interrupt"])
            state = HarnessState(final_state="suspended", interrupt=interrupt)
            asked = interrupt.id
        refuse_answer(id, state, answer)
        assert pending is not None
        value, bound = answer_to_wire(answer, asked)
        message = {"n": pending["n"], "interrupt": bound, "answer": value}
        await self.client.send_async(id, message, RESUME)
