"""Runs the tool calls of one assistant turn.

- Calls run concurrently, at most ``params.max_parallel_tools`` at a time; results come
  back in the order of the calls, whatever order they finish in.
- With ``params.eager_tools`` the stream phase calls :meth:`ToolRunner.prestart` at each
  ``tool_use_complete`` event, so a tool starts while the message is still streaming.
- Arguments are validated against the tool's schema first; bad ones never reach the tool.
- Each call runs under ``params.timeout_for(spec)``; at the limit it is cancelled (async
  tools), its process group is killed (shell, python and isolated tools), or it is left
  running in its thread and reported (plain sync tools; see ``innerloop.tools._define``).
- Every failure becomes an ``is_error`` result; nothing a tool does can crash the loop.
- Output is capped in bytes and tokens (:class:`OutputLimits`) with a notice of the cut.
- Cancellation (an abort) cancels the running calls and kills their processes.
"""

from __future__ import annotations

import asyncio
import inspect
import time
import types
from collections.abc import Callable, Coroutine, Generator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, final

import attrs

from innerloop._json import unreadable_reason
from innerloop._messages import ToolUseBlock
from innerloop.recovery._tokens import ApproxTokenCounter, TokenCounter
from innerloop.tools._output import OutputLimits, cap_output
from innerloop.tools._process import CHILD_ENV
from innerloop.tools._spec import (
    ToolCallResult,
    ToolContext,
    ToolError,
    ToolInterrupt,
    ToolOutput,
    ToolParams,
    ToolSpec,
    ToolState,
)
from innerloop.tools._validate import checked

if TYPE_CHECKING:
    from innerloop.recovery._tokens import MessageTokenCache

__all__ = [
    "ABORTED_TOOL",
    "CHILD_ENV",
    "ToolBatch",
    "ToolExecutor",
    "ToolObserver",
    "ToolRunner",
    "ToolScope",
]

ABORTED_TOOL = "not run: the run was aborted before this tool call completed"
"""The result of a call that had not finished when its run was aborted."""


class ToolObserver(Protocol):
    """Watches each tool call of a :class:`ToolRunner` (tracing). ``tool_started`` runs in
    the call's own task, before its arguments are checked; whatever it returns is handed
    back to ``tool_finished`` with the result, in the same task (also when the call was
    cancelled, with the ``ABORTED_TOOL`` result)."""

    def tool_started(self, call: ToolUseBlock, spec: ToolSpec | None, timeout: float | None) -> Any:
        """Start watching ``call`` (``spec`` is None for an unknown tool)."""

    def tool_finished(self, handle: Any, result: ToolCallResult) -> None:
        """``call`` finished with ``result``."""


class ToolScope(Protocol):
    """What an executor reads of a run: its params (the tools, limits, timeouts), its state
    (handed to tools), its token cache (for capping output) and a way for a tool to abort
    the run. A machine's ``PhaseContext`` is one; a durable worker builds one of its own."""

    @property
    def params(self) -> ToolParams: ...

    @property
    def state(self) -> ToolState: ...

    @property
    def tokens(self) -> MessageTokenCache: ...

    @property
    def request_abort(self) -> Callable[[str], None]: ...


@attrs.frozen
class ToolBatch:
    """The results of one turn's tool calls, in the order of the calls.

    ``cancelled`` is True when the batch was cancelled (an abort) before every call had
    finished: the calls that had finished keep their real results, the others have an
    ``is_error`` result ``ABORTED_TOOL`` (``error="aborted"``)."""

    results: tuple[ToolCallResult, ...]
    cancelled: bool = False


class ToolExecutor(Protocol):
    """Runs a run's tool calls. One instance per run (it may hold eagerly started calls).

    ``run_calls`` never raises for a failing tool and never loses a finished result: when
    it is cancelled it stops the running calls and returns a cancelled :class:`ToolBatch`
    (the caller re-raises the cancellation)."""

    def prestart(self, scope: ToolScope, call: ToolUseBlock) -> None:
        """Start ``call`` now, while the message still streams (eager dispatch)."""

    async def run_calls(self, scope: ToolScope, calls: Sequence[ToolUseBlock]) -> ToolBatch: ...

    async def cancel_all(self) -> None:
        """Cancel every eagerly started call (and kill its processes)."""


def aborted_result(call: ToolUseBlock) -> ToolCallResult:
    return ToolCallResult(call.id, call.name, ABORTED_TOOL, is_error=True, error="aborted")


class ToolRunner:
    """The default :class:`ToolExecutor`. One instance per run (it holds eager tasks).

    ``limits`` caps each result; ``token_counter`` counts its tokens (default: the run's
    counter); ``workspace`` is handed to tools as ``ctx.workspace``. Pass a configured
    runner to the harness with ``tool_runner_factory=lambda: ToolRunner(...)``.
    """

    def __init__(
        self,
        *,
        limits: OutputLimits | None = None,
        token_counter: TokenCounter | None = None,
        workspace: str | Path | None = None,
    ) -> None:
        self.limits = limits or OutputLimits()
        self.token_counter = token_counter
        self.workspace = Path(workspace) if workspace is not None else None
        self.observers: tuple[ToolObserver, ...] = ()
        """Watch every call (the driver sets its run observers' hooks here)."""
        self._eager: dict[str, asyncio.Task[ToolCallResult]] = {}
        self._semaphore: asyncio.Semaphore | None = None

    def prestart(self, scope: ToolScope, call: ToolUseBlock) -> None:
        """Start ``call`` now (eager dispatch, while the message still streams)."""
        if call.id not in self._eager:
            self._eager[call.id] = self._start(scope, call)

    async def run_calls(self, scope: ToolScope, calls: Sequence[ToolUseBlock]) -> ToolBatch:
        """Run ``calls`` (or collect their eager starts); results in the order of ``calls``.

        Eager starts that are not among ``calls`` (their message was cut off by max_tokens
        and dropped) are cancelled. If this is cancelled (an abort), the running calls are
        cancelled (their processes killed) and the batch comes back ``cancelled``."""
        if len(calls) == 1 and not self._eager:
            # one call, nothing started early: run it in this task (no task, no extra
            # event-loop round trips); an abort cancels it right here
            try:
                return ToolBatch((await self._call(scope, calls[0], alone=True),))
            except asyncio.CancelledError:
                return ToolBatch((aborted_result(calls[0]),), cancelled=True)
        wanted = {c.id for c in calls}
        stale = [t for i, t in self._eager.items() if i not in wanted]
        tasks = [
            self._eager.pop(c.id) if c.id in self._eager else self._start(scope, c) for c in calls
        ]
        self._eager.clear()
        await _cancel(stale)
        if not tasks:
            return ToolBatch(())
        try:
            # wait() rather than gather(): a cancelled gather cancels its tasks itself,
            # and a second cancel() would cut short their cleanup (killing processes)
            await asyncio.wait(tasks)
        except asyncio.CancelledError:
            await _cancel(tasks)
            finished = (_outcome(t) for t in tasks)
            return ToolBatch(
                tuple(r or aborted_result(c) for r, c in zip(finished, calls, strict=True)),
                cancelled=True,
            )
        return ToolBatch(tuple(t.result() for t in tasks))

    def _start(self, scope: ToolScope, call: ToolUseBlock) -> asyncio.Task[ToolCallResult]:
        return asyncio.ensure_future(self._call(scope, call))

    def _call(
        self, run: ToolScope, call: ToolUseBlock, *, alone: bool = False
    ) -> Coroutine[Any, Any, ToolCallResult]:
        """The coroutine that runs ``call``: watched when there are observers (no extra
        await layer when there are none). ``alone``: no other call of this runner runs
        meanwhile, so it needs no slot of ``max_parallel_tools``."""
        if self.observers:
            return self._observed(run, call, alone)
        return self._guarded(run, call, alone)

    async def _guarded(self, run: ToolScope, call: ToolUseBlock, alone: bool) -> ToolCallResult:
        try:
            ready = self._checked(run, call)
            if isinstance(ready, ToolCallResult):
                return ready
            spec, args = ready
            if alone:
                return await self.execute(run, spec, call, args)
            if self._semaphore is None:
                self._semaphore = asyncio.Semaphore(run.params.max_parallel_tools)
            async with self._semaphore:
                return await self.execute(run, spec, call, args)
        except (asyncio.CancelledError, KeyboardInterrupt):
            raise  # an abort, or the host's Ctrl-C: never a tool result
        except BaseException as exc:  # a bad schema or limit must not crash the loop either
            return self._failed(
                call,
                f"tool {call.name!r} could not be run: {type(exc).__name__}: {exc}",
                _name(exc),
            )

    async def _observed(self, run: ToolScope, call: ToolUseBlock, alone: bool) -> ToolCallResult:
        """``_guarded`` with the observers told of the call's start and result."""
        spec = run.params.tool(call.name)
        timeout = run.params.timeout_for(spec) if spec is not None else None
        handles = [o.tool_started(call, spec, timeout) for o in self.observers]
        observers, result = self.observers, None
        try:
            result = await self._guarded(run, call, alone)
            return result
        finally:
            if result is None:  # cancelled (an abort) or failed past _guarded
                result = aborted_result(call)
            for observer, handle in zip(reversed(observers), reversed(handles), strict=True):
                observer.tool_finished(handle, result)

    async def cancel_all(self) -> None:
        """Cancel every eagerly started call (and kill its processes)."""
        tasks = list(self._eager.values())
        self._eager.clear()
        await _cancel(tasks)

    def _checked(
        self, run: ToolScope, call: ToolUseBlock
    ) -> ToolCallResult | tuple[ToolSpec, Mapping[str, Any] | None]:
        """The tool ``call`` names and its arguments as its schema's check hands them
        back, or the error result of a call that cannot run (an unknown tool, arguments
        that cannot be read or do not fit the schema)."""
        spec = run.params.tool(call.name)
        if spec is None:
            known = ", ".join(t.name for t in run.params.tools) or "none"
            return self._failed(
                call, f"unknown tool {call.name!r}; available: {known}", "unknown_tool"
            )
        unreadable = unreadable_reason(call.input)
        if unreadable is not None:
            return self._failed(
                call,
                f"the arguments of tool {call.name!r} could not be read ({unreadable}), the "
                "tool was not run; call it again with "
                + ("flatter arguments" if unreadable.startswith("nested") else "one JSON object"),
                "invalid_arguments",
            )
        args, problems = checked(spec.input_schema, call.input)
        if problems:
            return self._failed(
                call,
                f"invalid arguments for tool {call.name!r}, the tool was not run: "
                + "; ".join(problems),
                "invalid_arguments",
            )
        return spec, args

    def _failed(self, call: ToolUseBlock, message: str, error: str) -> ToolCallResult:
        return ToolCallResult(call.id, call.name, message, is_error=True, error=error)

    async def execute(
        self,
        run: ToolScope,
        spec: ToolSpec,
        call: ToolUseBlock,
        args: Mapping[str, Any] | None = None,
    ) -> ToolCallResult:
        """Run one validated call under its timeout; every outcome becomes a result, its
        output capped (:class:`OutputLimits`). ``args``: the call's arguments as its
        schema's check handed them back (default: ``call.input``).

        Whatever the tool raises is reported, ``BaseException`` included (``SystemExit``,
        the ``CancelledError`` of a task it awaited), except two things that belong to
        the host and propagate: the cancellation of this very call (an abort; told apart
        from a tool's own ``CancelledError`` by ``current_task().cancelling()``), and
        ``KeyboardInterrupt`` (a Ctrl-C is the host's to handle, so a tool raising one is
        treated as one)."""
        limit = run.params.timeout_for(spec)
        ctx = ToolContext(
            run.params,
            run.state,
            call.id,
            self.workspace,
            limit,
            request_abort=run.request_abort,
            run=run,
        )
        start = time.monotonic()
        scope: asyncio.Timeout | None = None
        try:
            work = spec.handler(call.input if args is None else args, ctx)
            if type(work) is types.CoroutineType:
                try:  # its first step: a call that never waits needs no timer
                    step = work.send(None)
                except StopIteration as finished:
                    out = finished.value
                else:  # it waits: the rest runs under what is left of its limit
                    scope = asyncio.timeout(_left(limit, start))
                    async with scope:
                        out = await _Resumed(work, step)
            else:
                scope = asyncio.timeout(limit)
                async with scope:
                    out = await work
        except BaseException as exc:  # the tool's failure goes back to the model
            if isinstance(exc, TimeoutError) and scope is not None and scope.expired():
                return self._timed_out(ctx, spec, call, time.monotonic() - start)
            if _belongs_to_host(exc):
                raise
            done = _failed_with(call, start, exc)
        else:
            done = _returned(call, start, out)
        text, limits = done.output, self.limits
        counter = self.token_counter or run.tokens.counter or ApproxTokenCounter()
        if len(text) <= 16_384 and (limits.max_tokens is None or len(text) <= limits.max_tokens):
            output = cap_output(text, counter, limits)  # no tokenizing: cheap here
        else:  # bytes first, then tokens of what is left: off the loop all the same
            output = await asyncio.to_thread(cap_output, text, counter, limits)
        return done if output is text else attrs.evolve(done, output=output)

    def _timed_out(
        self, ctx: ToolContext, spec: ToolSpec, call: ToolUseBlock, duration: float
    ) -> ToolCallResult:
        limit = ctx.timeout or 0.0
        source = (
            "the tool's own timeout"
            if spec.timeout is not None
            else (f"category {spec.category!r}")
        )
        how = (
            "it may still be running in its worker thread (sync tools cannot be killed)"
            if _is_thread_tool(spec)
            else "it was stopped"
        )
        message = (
            f"tool {call.name!r} timed out after {duration:.1f} s (limit {limit:g} s from "
            f"{source}); {how}"
        )
        partial = ctx.partial
        if partial is not None and (partial.stdout or partial.stderr):
            message += (
                "\noutput before the timeout:\n" + (partial.stdout or "") + (partial.stderr or "")
            )
        return ToolCallResult(
            call.id,
            call.name,
            message,
            is_error=True,
            timed_out=True,
            duration=duration,
            stdout=partial.stdout if partial else None,
            stderr=partial.stderr if partial else None,
            error="timeout",
        )


def _result(
    call: ToolUseBlock, start: float, output: str, error: str | None, **extra: Any
) -> ToolCallResult:
    """The result of ``call``, started at ``start``; ``error`` None when it succeeded."""
    return ToolCallResult(
        call.id,
        call.name,
        output,
        is_error=error is not None,
        duration=time.monotonic() - start,
        error=error,
        **extra,
    )


def _failed_with(call: ToolUseBlock, start: float, exc: BaseException) -> ToolCallResult:
    """The result of ``call`` when its tool raised ``exc`` (a ``ToolInterrupt`` asks)."""
    if isinstance(exc, ToolError):
        return _result(call, start, str(exc), "tool_error")
    if isinstance(exc, ToolInterrupt):
        return _result(call, start, "", None, interrupt=exc.payload)
    return _result(call, start, _raised_text(call, exc), _name(exc))


def _left(limit: float | None, start: float) -> float | None:
    """What is left at this moment of a ``limit`` counted from ``start`` (None: no limit)."""
    return None if limit is None else limit - (time.monotonic() - start)


@final
class _Resumed:
    """Awaiting it goes on with a coroutine whose first step has run (``step``: what that
    step yielded), as ``await`` would have: each value it yields goes to the task, and
    what the task sends or throws goes back in (PEP 380's steps)."""

    __slots__ = ("_coro", "_step")

    def __init__(self, coro: Coroutine[Any, Any, Any], step: Any) -> None:
        self._coro, self._step = coro, step

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, step = self._coro, self._step
        while True:
            try:
                sent = yield step
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:
                try:
                    step = coro.throw(exc)
                except StopIteration as finished:
                    return finished.value
            else:
                try:
                    step = coro.send(sent)
                except StopIteration as finished:
                    return finished.value


def _outcome(task: asyncio.Task[ToolCallResult]) -> ToolCallResult | None:
    if not task.done() or task.cancelled() or task.exception() is not None:
        return None
    return task.result()


def _is_thread_tool(spec: ToolSpec) -> bool:
    fn = spec.function
    return fn is not None and not spec.isolated and not inspect.iscoroutinefunction(fn)


def _name(exc: BaseException) -> str:
    return type(exc).__name__


async def _cancel(tasks: Sequence[asyncio.Future[ToolCallResult]]) -> None:
    for t in tasks:
        t.cancel()
    if tasks:
        await asyncio.wait(tasks)


def _belongs_to_host(exc: BaseException) -> bool:
    """A Ctrl-C, or the cancellation of this very call (an abort), as opposed to the
    ``CancelledError`` of something the tool awaited."""
    if isinstance(exc, KeyboardInterrupt):
        return True
    task = asyncio.current_task()
    return isinstance(exc, asyncio.CancelledError) and task is not None and task.cancelling() > 0


def _raised_text(call: ToolUseBlock, exc: BaseException) -> str:
    text = str(exc)
    return f"tool {call.name!r} raised {type(exc).__name__}" + (f": {text}" if text else "")


def _returned(call: ToolUseBlock, start: float, out: object) -> ToolCallResult:
    """The result of ``call``, started at ``start``, for what its handler returned."""
    if not isinstance(out, ToolOutput):
        text = f"tool {call.name!r} handler returned {type(out).__name__}, not ToolOutput"
        return _result(call, start, text, "TypeError")
    return ToolCallResult(  # positional, in its fields' order (keywords cost more per call)
        call.id,
        call.name,
        out.content,
        out.is_error,
        False,  # timed_out
        time.monotonic() - start,
        out.stdout,
        out.stderr,
        out.exit_code,
        out.value,
        "tool_error" if out.is_error else None,
    )
