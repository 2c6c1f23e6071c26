"""Temporal adapter: a workflow drives the machine, the steps run as activities.

Recovery decisions have one owner, the machine. A failed model call (429, 5xx, overflow)
is an activity *result*, never an activity failure, so Temporal never retries it: the
machine's backoff, fallback and retry branches route it exactly as in process. Temporal
retries only what the machine cannot see: an activity that was lost because its worker
died (a heartbeat or start-to-close timeout). Those retries run on any live worker, at
most ``TemporalOptions.lost_step_attempts`` times, spaced by the RecoveryPolicy's backoff
numbers; after the last, the step counts as lost and the machine gets a transient error
(model call) or an error result (tool call).

The workflow is not sandboxed: the machine, its params (with tool handlers) and the
providers live in the worker's :class:`LoopApp`, which the workflow reaches through a
worker interceptor. Determinism holds by construction: the machine, guards and phase
handlers do no I/O except through the step stand-ins, and the clock is the workflow's
(backoff sleeps are durable timers).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any, TypeVar

import attrs
from temporalio import activity, workflow
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.exceptions import CancelledError as ActivityCancelled
from temporalio.service import RPCError
from temporalio.worker import (
    ExecuteWorkflowInput,
    Interceptor,
    Worker,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)

from innerloop._errors import ResumeError
from innerloop._events import Transition
from innerloop._harness import Harness
from innerloop.durable._app import LoopApp, loop_input
from innerloop.durable._codec import state_from_dict, state_to_dict
from innerloop.durable._steps import COMPACTION, MODEL_CALL, TOOL_CALL, StepCall, StepLost
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
from innerloop.fsm._params import HarnessParams
from innerloop.fsm._state import HarnessState, Interrupt

__all__ = [
    "LoopWorkflow",
    "TemporalLoopHandle",
    "TemporalLoops",
    "TemporalOptions",
    "WorkflowClock",
    "temporal_worker",
]

WORKFLOW_NAME = "innerloop.loop"
T = TypeVar("T")


@attrs.frozen
class TemporalOptions:
    """Timeouts and limits of the Temporal adapter (seconds unless said otherwise)."""

    heartbeat_timeout: float = 30.0
    """A worker that stops heartbeating for this long is taken for dead; its step moves."""
    model_call_timeout: float = 600.0
    """Start-to-close limit of one model call (the whole stream)."""
    tool_grace: float = 30.0
    """Added to a tool's own timeout (which the worker enforces) for the activity limit."""
    compaction_timeout: float = 600.0
    lost_step_attempts: int = 3
    """How often a step lost with its worker is started again, the first run included."""
    max_history_events: int = 10_000
    """Continue-as-new at the next turn boundary once the history holds this many events
    (or when the server suggests it)."""
    continue_at: tuple[str, ...] = ("assemble",)
    """States at whose entry a run may continue as new (nothing is in flight there)."""
    carry_events: int = 1_000
    """At most this many events the host has not acknowledged yet move on to the next run
    at a continue-as-new, so a host that polls ``events`` loses none of them."""


class WorkflowClock:
    """The workflow's deterministic clock: sleeping is a durable timer."""

    def monotonic(self) -> float:
        return workflow.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(seconds, 0.0))

    def jitter(self) -> float:
        """Backoff jitter from the workflow's seeded random: the same on every replay."""
        return 1.0 - workflow.random().random()


def _retry(params: HarnessParams, options: TemporalOptions) -> RetryPolicy:
    policy = params.recovery
    return RetryPolicy(
        initial_interval=timedelta(seconds=policy.backoff_initial),
        backoff_coefficient=policy.backoff_factor,
        maximum_interval=timedelta(seconds=policy.backoff_max),
        maximum_attempts=options.lost_step_attempts,
    )


def _timeout(step: str, args: Mapping[str, Any], app: LoopApp, o: TemporalOptions) -> float:
    if step == TOOL_CALL:
        # the tool's own params: the loop's, or the child's whose call it is
        params = app.level(args["loop"], args.get("child", ())).params
        spec = params.tool(args["call"]["name"])
        seconds = params.timeout_for(spec) if spec is not None else 0.0
        return seconds + o.tool_grace
    return o.model_call_timeout if step == MODEL_CALL else o.compaction_timeout


def _activity_caller(app: LoopApp, loop: str, options: TemporalOptions) -> StepCall:
    retry = _retry(app.get(loop).params, options)

    async def call(step: str, args: dict[str, Any]) -> dict[str, Any]:
        try:
            result: dict[str, Any] = await workflow.execute_activity(
                f"innerloop.{step}",
                args,
                start_to_close_timeout=timedelta(seconds=_timeout(step, args, app, options)),
                heartbeat_timeout=timedelta(seconds=options.heartbeat_timeout),
                retry_policy=retry,
            )
        except ActivityError as exc:
            if isinstance(exc.cause, ActivityCancelled):  # the loop cancelled it (an abort)
                raise asyncio.CancelledError from exc
            raise StepLost(
                f"{step} failed {options.lost_step_attempts} times: {exc.cause}"
            ) from exc
        return result

    return call


@workflow.defn(name=WORKFLOW_NAME, sandboxed=False)
class LoopWorkflow:
    """One loop. Input: :func:`loop_input`. Queries ``events(since)`` and ``interrupt``;
    signals ``abort`` and ``ack_events(next)`` (the host has read the events before
    ``next``); update ``resume(answer)``.

    A run that suspends keeps its workflow open: it waits (a durable condition, no activity
    running) for a ``resume`` update, checked like ``Harness.resume`` checks an answer, up
    to the input's ``suspend_timeout`` (then the workflow ends in ``suspended``)."""

    def __init__(self) -> None:
        self._events: list[dict[str, Any]] = []
        self._base = 0
        self._acked = 0
        self._run: Run | None = None
        self._abort: str | None = None
        self._binding: tuple[LoopApp, TemporalOptions] | None = None
        self._waiting = False
        self._answer: tuple[Any] | None = None
        self._ended = False

    def bind(self, app: LoopApp, options: TemporalOptions) -> None:
        self._binding = (app, options)

    @workflow.run
    async def run(self, start: dict[str, Any]) -> dict[str, Any]:
        if self._binding is None:
            raise RuntimeError(
                "LoopWorkflow runs only on a worker built by temporal_worker(), which gives "
                "it the worker's LoopApp"
            )
        app, options = self._binding
        carried = start.get("carried_events") or []
        self._events = list(carried)
        self._base = start.get("events_base", 0) - len(carried)
        self._acked = self._base
        call = _activity_caller(app, start["loop"], options)
        harness = app.harness(start["loop"], call, WorkflowClock())
        run: Run | None = start_run(harness, start)
        while run is not None:
            self._run = run
            if self._abort is not None:
                run.abort(self._abort)
            if not await self._drive(run, options):
                self._continue_as_new(start, run, options)
            run = await self._next(harness, run, start.get("suspend_timeout"))
        self._ended = True
        assert self._run is not None
        return state_to_dict(self._run.state)

    async def _drive(self, run: Run, options: TemporalOptions) -> bool:
        """Drive ``run`` to a final state (True), or to a turn boundary where the history
        is full (False: continue as new)."""
        events = run.events()
        try:
            async for event in events:
                self._events.append(event.to_dict())
                if (
                    isinstance(event, Transition)
                    and event.target in options.continue_at
                    and self._history_full(options)
                ):
                    return False
        finally:
            await events.aclose()
        return True

    async def _next(self, harness: Harness, run: Run, limit: float | None) -> Run | None:
        """After a final state: the resumed run once the answer came, or None (the run
        ended, or stayed suspended past ``limit`` seconds)."""
        if run.state.final_state != "suspended":
            return None
        self._waiting = True
        try:
            await workflow.wait_condition(
                lambda: self._answer is not None or self._abort is not None, timeout=limit
            )
        except TimeoutError:
            return None
        finally:
            self._waiting = False
        if self._answer is None:
            assert self._abort is not None
            return aborted_run(harness, run.state, self._abort)
        (answer,) = self._answer
        self._answer = None
        return resumed_run(harness, workflow.info().workflow_id, run.state, answer)

    def _continue_as_new(self, start: dict[str, Any], run: Run, options: TemporalOptions) -> None:
        unread = self._events[max(self._acked - self._base, 0) :][-options.carry_events :]
        workflow.continue_as_new(
            {
                **loop_input(
                    start["loop"],
                    state=state_to_dict(run.state),
                    start_at=run.current,
                    suspend_timeout=start.get("suspend_timeout"),
                ),
                "events_base": self._base + len(self._events),
                "carried_events": unread,
            }
        )

    def _history_full(self, options: TemporalOptions) -> bool:
        info = workflow.info()
        return (
            info.get_current_history_length() >= options.max_history_events
            or info.is_continue_as_new_suggested()
        )

    @workflow.query(name="events")
    def events(self, since: int = 0) -> dict[str, Any]:
        """Events from index ``since`` on (indices count across continue-as-new); ``next``
        is the index to ask for next time; ``ended`` once the workflow returns (after the
        last of these events)."""
        start = max(since - self._base, 0)
        return {
            "events": self._events[start:],
            "next": self._base + len(self._events),
            "state": self._run.current if self._run is not None else None,
            "ended": self._ended,
        }

    @workflow.query(name="interrupt")
    def interrupt(self) -> dict[str, Any] | None:
        """The interrupt the suspended run waits on (None while it is not waiting)."""
        if not self._waiting or self._run is None or self._run.state.interrupt is None:
            return None
        return interrupt_to_dict(self._run.state.interrupt)

    @workflow.update(name="resume")
    def resume(self, answer: Any, interrupt_id: str = "") -> None:
        """Answer the suspended run's interrupt (the one named ``interrupt_id``, when
        given); the run goes on from where it stopped."""
        self._waiting = False  # a second answer before the run goes on is refused
        self._answer = (answer_from_wire(answer, interrupt_id),)

    @resume.validator
    def _check_resume(self, answer: Any, interrupt_id: str = "") -> None:
        answer = answer_from_wire(answer, interrupt_id)
        state = self._run.state if self._run is not None else None
        try:
            if state is not None and state.final_state == "suspended" and not self._waiting:
                raise ResumeError(
                    None,
                    "it is not waiting for an answer any more: it has one already, or its "
                    "suspend_timeout has passed",
                    answer,
                )
            refuse_answer(workflow.info().workflow_id, state, answer)
        except ResumeError as exc:
            raise ApplicationError(exc.reason, type="ResumeError", non_retryable=True) from None

    @workflow.signal(name="ack_events")
    def ack_events(self, next_index: int) -> None:
        self._acked = max(self._acked, next_index)

    @workflow.signal(name="abort")
    def abort(self, reason: str = "abort requested by the host") -> None:
        self._abort = reason
        if self._run is not None:
            self._run.abort(reason)


class _Binder(Interceptor):
    """Hands the worker's app and options to each LoopWorkflow instance it runs."""

    def __init__(self, app: LoopApp, options: TemporalOptions) -> None:
        self.app = app
        self.options = options

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor]:
        app, options = self.app, self.options

        class Bind(WorkflowInboundInterceptor):
            async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
                instance = workflow.instance()
                if isinstance(instance, LoopWorkflow):
                    instance.bind(app, options)
                return await super().execute_workflow(input)

        return Bind


async def _heartbeating(work: Awaitable[T]) -> T:
    """Await ``work`` while heartbeating, so a dead worker is noticed and a cancel
    request reaches the activity."""
    timeout = activity.info().heartbeat_timeout
    interval = timeout.total_seconds() / 3 if timeout else 10.0
    task = asyncio.ensure_future(work)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=interval)
            if done:
                return task.result()
            activity.heartbeat()
    finally:
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


def _activities(app: LoopApp) -> list[Callable[..., Any]]:
    def make(step: str) -> Callable[..., Any]:
        @activity.defn(name=f"innerloop.{step}")
        async def run_step(args: dict[str, Any]) -> dict[str, Any]:
            return await _heartbeating(app.execute(step, args))

        return run_step

    return [make(step) for step in (MODEL_CALL, TOOL_CALL, COMPACTION)]


def temporal_worker(
    client: Client,
    app: LoopApp,
    *,
    task_queue: str = "innerloop",
    options: TemporalOptions | None = None,
    **worker_kwargs: Any,
) -> Worker:
    """A worker that runs ``app``'s loops: their workflows and their steps."""
    options = options or TemporalOptions()
    interceptors: Sequence[Interceptor] = (
        _Binder(app, options),
        *worker_kwargs.pop("interceptors", ()),
    )
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[LoopWorkflow],
        activities=_activities(app),
        interceptors=interceptors,
        **worker_kwargs,
    )


@attrs.frozen
class TemporalLoopHandle:
    """A running loop, seen from the host."""

    handle: WorkflowHandle[Any, Any]

    @property
    def id(self) -> str:
        return self.handle.id

    async def events(self, poll: float = 0.2) -> AsyncIterator[dict[str, Any]]:
        """Every event as a dict, in order, until the loop finishes (polls the query)."""
        since = 0
        while True:
            page = await self.handle.query(LoopWorkflow.events, since)
            for i, event in enumerate(page["events"], start=1):
                yield event
                if _last(event, page, i):
                    return
            if page["next"] > since:  # so a continue-as-new carries only what is unread
                with contextlib.suppress(RPCError):  # ended meanwhile: nothing to carry
                    await self.handle.signal(LoopWorkflow.ack_events, page["next"])
            since = page["next"]
            await asyncio.sleep(poll)

    async def result(self) -> HarnessState:
        """Wait for the end; the final state."""
        return state_from_dict(await self.handle.result())

    async def abort(self, reason: str = "abort requested by the host") -> None:
        """End the loop: at once while it runs or waits suspended (the pending tool calls
        get error results)."""
        await self.handle.signal(LoopWorkflow.abort, reason)

    async def interrupt(self) -> Interrupt | None:
        """What the suspended run waits for, or None while it is not waiting."""
        data = await self.handle.query(LoopWorkflow.interrupt)
        return interrupt_from_dict(data) if data is not None else None

    async def resume(self, answer: Any) -> None:
        """Answer the suspended run; it goes on in its workflow. An answer that does not
        fit (or a run that is not waiting, or an :class:`~innerloop.Answer` for another
        interrupt than the one it waits on) raises :class:`~innerloop.ResumeError`, and
        the workflow keeps waiting as it was."""
        value, bound = answer_to_wire(answer)
        try:
            await self.handle.execute_update(LoopWorkflow.resume, args=[value, bound])
        except WorkflowUpdateFailedError as exc:
            cause = exc.cause
            reason = cause.message if isinstance(cause, ApplicationError) else str(cause)
            raise ResumeError(self.id, reason, answer) from None
        except RPCError as exc:
            raise ResumeError(
                self.id, f"its workflow takes no answer (it has ended?): {exc}", answer
            ) from None


def _last(event: Mapping[str, Any], page: Mapping[str, Any], index: int) -> bool:
    """Whether ``event`` (the ``index``-th of ``page``) is the loop's last: a ``finished``
    event, unless the run suspended and its workflow waits for the answer."""
    if event["type"] != "finished":
        return False
    if event.get("exit_reason") != "suspended":
        return True
    return bool(page["ended"]) and index == len(page["events"])


@attrs.frozen
class TemporalLoops:
    """The host's side: start loops on a task queue, get handles to running ones."""

    client: Client
    task_queue: str = "innerloop"

    async def start(
        self,
        loop: str,
        prompt: str | None = None,
        *,
        id: str,
        tasks: Sequence[str] = (),
        suspend_timeout: float | None = None,
        **start_kwargs: Any,
    ) -> TemporalLoopHandle:
        """Start loop ``loop`` as workflow ``id``. ``suspend_timeout``: seconds a
        suspended run waits for :meth:`TemporalLoopHandle.resume` before its workflow ends
        in ``suspended`` (None: as long as it takes)."""
        handle = await self.client.start_workflow(
            WORKFLOW_NAME,
            loop_input(loop, prompt, tasks=tasks, suspend_timeout=suspend_timeout),
            id=id,
            task_queue=self.task_queue,
            **start_kwargs,
        )
        return TemporalLoopHandle(handle)

    def get(self, id: str) -> TemporalLoopHandle:
        return TemporalLoopHandle(self.client.get_workflow_handle(id))
