"""Phase handlers of the default machine, one function per state (same name).

A handler receives the run's :class:`PhaseContext`, does the phase's work and records its
:class:`Outcome` in ``ctx.state``; it never picks the next state (the guards do). Handlers
return a list of events or yield them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from typing import TypeAlias

import attrs

from innerloop._errors import ErrorCategory, ProviderError
from innerloop._events import (
    Abort,
    Alert,
    Backoff,
    Compacted,
    Event,
    Fallback,
    MessageComplete,
    ModelCall,
    ModelError,
    ModelResponseEvent,
    StreamEvent,
    ToolExecuted,
    ToolUseComplete,
)
from innerloop._history import History
from innerloop._json import unreadable_reason
from innerloop._log import log_model_failure
from innerloop._messages import (
    Block,
    Message,
    ModelResponse,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)
from innerloop.fsm._context import PhaseContext, relay
from innerloop.fsm._guards import is_final_call, model_finished
from innerloop.fsm._interrupts import (
    answered_batch,
    deliver_answer,
    suspend_for_questions,
    with_kept,
)
from innerloop.fsm._output import (
    ACCEPTED,
    ALONE,
    OUTPUT_TOOL,
    InvalidOutput,
    OutputSpec,
    PartialOutput,
)
from innerloop.fsm._params import HarnessParams
from innerloop.fsm._spec import WORK, Handler
from innerloop.fsm._state import Outcome
from innerloop.providers._base import ModelStream, close_iterator
from innerloop.providers._fingerprint import request_digests
from innerloop.providers._normalize import WireRequest, build_request, with_output_tool
from innerloop.recovery._compaction import CompactionRequest, CompactionResult
from innerloop.recovery._diagnostic import build_diagnostic
from innerloop.recovery._gate import Admission, RateLimitGate
from innerloop.recovery._policy import backoff_delay, jitter_fraction, refused_wait
from innerloop.recovery._pricing import add_cost, price_for
from innerloop.recovery._tokens import count_message
from innerloop.tools._runner import ABORTED_TOOL, ToolBatch, ToolScope
from innerloop.tools._spec import ToolCallResult

__all__ = [
    "abort",
    "assemble",
    "backoff",
    "call",
    "check",
    "compact",
    "execute",
    "fallback",
    "idle",
    "normalize",
    "repair",
    "stream",
]


Events: TypeAlias = AsyncGenerator[Event, None]
Steps: TypeAlias = Sequence[Event] | Events | None
"""What the work of a phase (see :func:`_handler`) gives back: its events (a list, or
None), or a generator yielding them, when they must be passed on as they come."""


def _handler(work: Callable[[PhaseContext], Awaitable[Steps]]) -> Handler:
    """The phase handler of the spec for ``work`` (``_stream`` gives ``stream``): an async
    generator yielding the events ``work`` gives back (those of a list as reports of
    what it booked, which an abort lets out; see :func:`_reporting`), for whoever steps
    handlers. The driver awaits ``work`` in its place (:func:`~innerloop.fsm._spec.work_of`)."""

    async def handler(ctx: PhaseContext) -> Events:
        steps = await work(ctx)
        if steps is None:
            return
        events = _reporting(ctx, steps) if isinstance(steps, Sequence) else steps
        async with contextlib.aclosing(events):
            async for event in events:
                yield event

    name = work.__name__.lstrip("_")
    handler.__name__ = handler.__qualname__ = name  # the spec's signature names it
    handler.__doc__ = work.__doc__
    setattr(handler, WORK, work)
    return handler


async def idle(ctx: PhaseContext) -> None:
    ctx.state.outcome = Outcome.STARTED


def _unpriced_alert(params: HarnessParams, models: Sequence[tuple[str, str | None]]) -> list[Event]:
    """An alert when a dollar spend budget cannot fire because a model (with the name of
    the provider that serves it, when known) has no price."""
    budget = params.spend_budget
    if budget is None or budget.max_cost_usd is None:
        return []
    missing = [
        model
        for model, provider in dict.fromkeys(models)
        if price_for(model, params.prices, provider) is None
    ]
    if not missing:
        return []
    names = ", ".join(missing)
    return [
        Alert(
            "unpriced_model",
            f"no price for {names} in params.prices or genai-prices: the run's dollar cost is "
            "unknown, so spend_budget.max_cost_usd cannot end the run; add prices with "
            f"HarnessParams(prices=merge_prices({{{missing[0]!r}: Price(input, output)}}))",
        )
    ]


def _static_tokens(ctx: PhaseContext) -> int:
    """Tokens of the system prompt and the tool definitions of this turn, counted when
    first needed in the run (by a context budget, or a compaction), and again after the
    tools offered changed."""
    scope, params = ctx.scope, ctx.params
    if scope.static_tokens is None:
        system, tools = params.system, params.tool_definitions
        if scope.offered is not None:
            tools = tuple(t.to_definition() for t in scope.offered)
        if params.final_result_tool:  # counted for every model of the chain: the larger
            asked = with_output_tool(scope.settings)
            system, tools = asked.system, (*tools, asked.tools[-1])
        scope.static_tokens = ctx.deps.tokens.count_static(system, tools)
    return scope.static_tokens


async def assemble(ctx: PhaseContext) -> list[Event]:
    """Count the request: system prompt and tools once per run, history incrementally
    (with a context budget to compare them with)."""
    events: list[Event] = []
    scope, tokens, params = ctx.scope, ctx.deps.tokens, ctx.params
    if params.prepare_tools is not None or params.tool_sources:
        from innerloop.fsm._offer import offer_tools  # only for runs that choose tools

        if await offer_tools(ctx):  # the tools of this turn changed: counted anew
            scope.static_tokens = None
    if not scope.assembled:  # the run's first request
        scope.assembled = True
        events += _unpriced_alert(params, [(c.model, c.provider) for c in params.model_chain])
    state = ctx.state
    if params.context_budget is None:
        # nothing to compare against: skip tokenizing (compaction counts what it needs)
        state.outcome = Outcome.ASSEMBLED
        return events
    static = scope.static_tokens  # counted once per run (and after the tools changed)
    if static is None:
        static = _static_tokens(ctx)
    state.context_tokens = static + tokens.count_history(state.history)
    exact_counter = tokens.exact
    if exact_counter is not None:  # an exact counter also counts the whole wire request
        request = build_request(
            scope.settings, state.history, ctx.provider.dialect, ctx.choice.model
        )
        exact = await exact_counter.count_request(request)
        if exact is not None:
            state.context_tokens = exact
    state.outcome = Outcome.ASSEMBLED
    return events


def _compaction_reason(ctx: PhaseContext) -> str:
    state = ctx.state
    if state.error is not None and state.error.category is ErrorCategory.CONTEXT_OVERFLOW:
        return "overflow"
    if state.outcome == Outcome.RESPONSE and state.last_response is not None:
        if state.last_response.stop_reason == "max_tokens":
            return "max_tokens"
    return "budget"


async def _run_compactor(
    ctx: PhaseContext, request: CompactionRequest
) -> tuple[CompactionResult, Exception | None]:
    """The run's compactor; if it fails, the deterministic fallback and the failure."""
    deps = ctx.deps
    try:
        return await deps.compactor.compact(request, deps.tokens), None
    except Exception as exc:  # a failing summarizer must not lose the run: fall back
        return await deps.fallback_compactor.compact(request, deps.tokens), exc


def _append_user_text(history: list[Message], text: str) -> None:
    """Add ``text`` as user input, keeping user/assistant alternation."""
    if history and history[-1].role == "user":
        last = history[-1]
        history[-1] = Message("user", (*last.content, TextBlock(text)))
    else:
        history.append(Message.user(text))


def _under_pressure(ctx: PhaseContext, tokens: int) -> bool:
    """A history of ``tokens`` (as the budget counts them) leaves no room: a context
    budget is set and it is over it. Without pressure a compaction drops nothing."""
    budget = ctx.params.context_budget
    return budget is not None and tokens > budget


async def compact(ctx: PhaseContext) -> AsyncIterator[Event]:
    """Shrink history for one of three reasons: budget, max_tokens or overflow."""
    state, params, policy, tokens = ctx.state, ctx.params, ctx.params.recovery, ctx.deps.tokens
    reason = _compaction_reason(ctx)
    history = tuple(state.history)
    before = tokens.count_history(history)
    static = _static_tokens(ctx)
    # an exact count (see RequestTokenCounter) may disagree with the local one that plans
    # the cut: budget targets are scaled by how far the local count is off
    local = before + static
    if state.context_tokens <= 0:  # not counted by assemble (no context budget)
        state.context_tokens = local
    scale = local / state.context_tokens
    if reason == "overflow":
        yield Alert(
            "context_overflow",
            "the provider rejected the prompt as too long although it was counted at "
            f"{state.context_tokens} tokens: the token counter is wrong; emergency compaction",
        )
        budget = params.context_budget or (state.context_tokens or local)
        # the provider's limit is below our count: shrink to the fraction of the budget, and
        # never less than that fraction of what we sent (else a bad counter loops forever)
        fraction = policy.overflow_compact_target
        target = int(min(budget * fraction * scale, local * fraction)) - static
    elif reason == "max_tokens":
        # calls started eagerly from the truncated turn were discarded with it
        await ctx.deps.tools.cancel_all()
        target = int(before * (1 - policy.max_tokens_compact_fraction))
    else:
        assert params.context_budget is not None
        target = int(params.context_budget * policy.budget_compact_target * scale) - static
    failure: Exception | None = None
    if reason == "max_tokens" and not _under_pressure(ctx, local):
        result = CompactionResult(history, 0)  # room left: only the continuation is added
    else:
        request = CompactionRequest(
            history, max(target, 0), reason, policy.keep_recent_messages
        )
        result, failure = await _run_compactor(ctx, request)
    if failure is not None:
        yield Alert(
            "compactor_failed",
            f"{type(failure).__name__}: {failure}; the deterministic compactor took over",
        )
    if result.usage != Usage():
        state.usage = state.usage + result.usage
        known = state.cost_usd is not None
        state.cost_usd = add_cost(state.cost_usd, result.usage, result.model, params.prices)
        if known and state.cost_usd is None:
            for alert in _unpriced_alert(params, [(result.model, None)]):
                yield alert
    state.history = History(result.history)
    if reason == "max_tokens":
        _append_user_text(state.history, policy.continuation_message)
    tokens.forget_missing(state.history)
    after = tokens.count_history(state.history)
    shrank = result.removed > 0 and after < before
    state.error = None
    state.compaction_reason = reason
    state.outcome = Outcome.COMPACTED if shrank or reason == "max_tokens" else Outcome.CANNOT_SHRINK
    yield Compacted(reason, before + static, after + static, result.removed)


async def normalize(ctx: PhaseContext) -> None:
    """Pure ``build_request`` for the active provider's wire format."""
    scope = ctx.scope
    scope.request = build_request(
        scope.settings, ctx.state.history, ctx.provider.dialect, ctx.choice.model
    )
    ctx.state.outcome = Outcome.NORMALIZED


_RATE = (ErrorCategory.RATE_LIMITED, ErrorCategory.OVERLOADED)


def _refusal(ctx: PhaseContext, error: ProviderError) -> str | None:
    """Why the wait a rate-limited call's server asks for is refused (None: it is not)."""
    return refused_wait(ctx.params.recovery, error) if error.category in _RATE else None


def _record_failure(ctx: PhaseContext, error: ProviderError) -> None:
    state, policy = ctx.state, ctx.params.recovery
    refusal = _refusal(ctx, error)
    if refusal is not None:  # no retry here: fall back at once, or fail quoting the header
        error = error.reworded(f"{error.message}; {refusal}", keep_wait=False)
    log_model_failure(error)
    state.error = error
    state.count_error(error.category.value)
    if error.category in _RATE:
        state.rate_limit_failures += 1
    elif error.category is ErrorCategory.TRANSIENT:
        state.transient_failures += 1
    if refusal is not None:
        state.rate_limit_failures = max(
            state.rate_limit_failures, policy.max_rate_limit_retries + 1
        )
    state.outcome = Outcome.FAILED


def _gate(ctx: PhaseContext) -> RateLimitGate:
    choice = ctx.choice
    key = (choice.provider, choice.model)
    gate = ctx.scope.gates.get(key)
    if gate is None:
        gate = ctx.scope.gates[key] = ctx.deps.gates.gate(ctx.provider, choice.model)
    return gate


def _has_fallback(ctx: PhaseContext) -> bool:
    return ctx.state.active + 1 < len(ctx.params.model_chain)


def _gate_failure(ctx: PhaseContext, error: ProviderError) -> None:
    """Tell the model's shared gate how a sent call failed; when that leaves the circuit
    open, the run's retries on this model are pointless: it falls back at once."""
    gate = _gate(ctx)
    if error.category not in _RATE:
        gate.release()
        return
    # a refused wait holds no one: the other runs meet (and refuse) it themselves
    hold = None if _refusal(ctx, error) is not None else error.retry_after
    gate.failure(ctx.deps.clock.monotonic(), hold)
    if gate.state == "open" and _has_fallback(ctx):
        ctx.state.rate_limit_failures = ctx.params.recovery.max_rate_limit_retries


def _circuit_open(ctx: PhaseContext, wait: float) -> None:
    """Fail the call without sending it: the guards fall back at once."""
    state, choice = ctx.state, ctx.choice
    error = ProviderError(
        ErrorCategory.RATE_LIMITED,
        f"circuit open for {choice.provider}:{choice.model} (rate limited by many calls in a "
        f"row; the next probe in {wait:.1f} s): falling back without sending",
        provider=choice.provider,
        retry_after=wait,
    )
    _record_failure(ctx, error)
    state.rate_limit_failures = ctx.params.recovery.max_rate_limit_retries + 1


def _model_call(ctx: PhaseContext, request: WireRequest) -> ModelCall:
    messages = request.payload.get("messages")
    count = len(messages) if isinstance(messages, list | tuple) else 0
    fingerprint, parts = request_digests(request)
    offered = ctx.scope.offered
    tools = None if offered is None else tuple(t.name for t in offered)
    return ModelCall(
        ctx.choice.provider, request.dialect, ctx.choice.model, fingerprint, parts, count, tools
    )


async def _call(ctx: PhaseContext) -> Steps:
    """``call``'s work (see :func:`_handler`): pass the model's rate-limit gate, then open
    the streaming request. Opened here when the gate lets the call go at once and nobody
    reads ``model_call`` (a quiet run); a wait at the gate, the event and a failure are
    the generator's it returns."""
    state, scope = ctx.state, ctx.scope
    state.error = None
    if scope.request is None:  # resumed here from a checkpoint: normalize again
        scope.request = build_request(
            scope.settings, state.history, ctx.provider.dialect, ctx.choice.model
        )
    gate = _gate(ctx)
    if gate.slots is not None:  # a concurrency limit: wait for a slot, then the gate
        return _calling(ctx, gate, None)
    admission = gate.admit(ctx.deps.clock.monotonic())
    if admission.wait > 0 or not scope.quiet:
        return _calling(ctx, gate, admission)
    return await _open(ctx, gate)


call = _handler(_call)


async def _calling(
    ctx: PhaseContext, gate: RateLimitGate, admission: Admission | None
) -> Events:
    """``call`` from the gate's first ``admission`` on (None: take an endpoint slot
    first, then ask): wait while it holds the call back, say what is sent
    (``model_call``, when someone reads it), open."""
    state, scope, clock = ctx.state, ctx.scope, ctx.deps.clock
    if admission is None:
        assert gate.slots is not None
        await gate.slots.acquire()
        scope.slot = gate.slots
        admission = gate.admit(clock.monotonic())
    while admission.wait > 0:
        if admission.circuit_open and _has_fallback(ctx):
            scope.release_slot()
            _circuit_open(ctx, admission.wait)
            return
        yield Backoff(state.rate_limit_failures, admission.wait, None, state.total_wait)
        await clock.sleep(admission.wait)
        state.total_wait += admission.wait
        admission = gate.admit(clock.monotonic())
    if not scope.quiet:  # what a replay checks; a quiet run() is never logged
        assert scope.request is not None
        yield _model_call(ctx, scope.request)
    opened = await _open(ctx, gate)
    if isinstance(opened, Sequence):
        for event in opened:
            yield event
    elif opened is not None:
        async with contextlib.aclosing(opened):
            async for event in opened:
                yield event


async def _open(ctx: PhaseContext, gate: RateLimitGate) -> Steps:
    """Open the request the gate let go, the stream kept in ``scope``: None, the alerts
    the provider gave with the stream (what it did differently to get it, as
    ``OpenAIProvider``'s unstreamed re-ask), or the generator reporting the failure (both
    ways of ``call`` end here)."""
    scope = ctx.scope
    assert scope.request is not None
    try:
        scope.stream = stream = await ctx.provider.open(scope.request)
    except Exception as exc:
        scope.release_slot()
        return _open_failed(ctx, ProviderError.wrap(exc, ctx.choice.provider))
    gate.success()
    ctx.state.outcome = Outcome.OPENED
    notices: tuple[Alert, ...] = getattr(stream, "notices", ())
    return list(notices) if notices else None


async def _open_failed(ctx: PhaseContext, error: ProviderError) -> Events:
    yield ModelError(error, "open")
    _gate_failure(ctx, error)
    _record_failure(ctx, error)  # counts this failure: past the retries when open


def _estimated(ctx: PhaseContext, response: ModelResponse) -> ModelResponse:
    """``response`` with the usage its server did not report, counted with the run's
    token counter: the request as sent (system prompt, tools, history) and the answer."""
    tokens = ctx.deps.tokens
    sent = _static_tokens(ctx) + tokens.count_history(ctx.state.history)
    received = count_message(tokens.counter, response.message)
    return attrs.evolve(response, usage=Usage(sent, received, estimated=True))


def _usage_alert(ctx: PhaseContext, usage: Usage) -> Alert:
    choice = ctx.choice
    return Alert(
        "usage_estimated",
        f"{choice.provider}:{choice.model} reported no token usage: innerloop counted "
        f"{usage.input_tokens} tokens in and {usage.output_tokens} out with "
        f"{ctx.deps.tokens.counter!r} (Usage.estimated); spend budgets use the count. For a "
        "count in the model's own tokens, give the Harness its tokenizer (token_counter=)",
    )


def _accept(ctx: PhaseContext, response: ModelResponse) -> ModelResponse:
    """Book a complete response: counters, cost, and the assistant message in history.
    A response without usage gets a counted one (:func:`_estimated`)."""
    state, params = ctx.state, ctx.params
    usage = response.usage
    if not (usage.input_tokens or usage.output_tokens):
        response = _estimated(ctx, response)
    state.turns += 1
    state.usage = state.usage + response.usage
    model = response.model or ctx.choice.model
    if model not in state.resolved_models:  # bounded: a long conversation stays linear
        state.resolved_models.append(model)
    state.cost_usd = add_cost(
        state.cost_usd, response.usage, model, params.prices, ctx.choice.provider
    )
    state.rate_limit_failures = 0
    state.transient_failures = 0
    state.error = None
    message = response.message
    if response.stop_reason == "max_tokens" and message.tool_uses:
        # a call cut off by max_tokens is never executed; the model re-issues it after the
        # continuation message
        kept: tuple[Block, ...] = tuple(
            b for b in message.content if not isinstance(b, ToolUseBlock)
        )
        message = Message("assistant", kept)
        response = attrs.evolve(response, message=message)
    history = state.history
    if message.content and history and history[-1].role == "assistant":
        # the server paused a long turn (Anthropic's pause_turn): the request sent it
        # back as it was and this response goes on with it, in the same message
        history[-1] = Message("assistant", (*history[-1].content, *message.content))
    elif message.content:
        history.append(message)
    state.last_response = response
    state.outcome = Outcome.RESPONSE
    return response


def _partial_output(ctx: PhaseContext) -> PartialOutput | None:
    """What follows the typed answer of this turn as it streams (None without an
    ``output_type``)."""
    params = ctx.params
    if params.output_spec is None:
        return None
    return PartialOutput(
        text=not params.output_tool(ctx.choice.model), tool=params.final_result_tool
    )


async def _stream(ctx: PhaseContext) -> Steps:
    """``stream``'s work (see :func:`_handler`): consume the stream, start eager tools,
    book the response. A quiet run has nothing to pass on before the answer is complete:
    read here, the events its watchers want returned (:func:`_complete`); otherwise the
    generator it returns forwards each event (followed by an ``OutputDelta`` when it
    changed the typed answer parsed so far)."""
    if not ctx.scope.quiet:
        return _streaming(ctx)
    model_stream = ctx.scope.stream
    assert model_stream is not None, "stream runs after call opened one"
    eager = ctx.params.eager_tools
    events = aiter(model_stream)  # closed here: left to the loop, each turn cost a task
    try:
        async for event in events:
            if isinstance(event, MessageComplete):
                return _complete(ctx, event)
            if eager:
                _start_early(ctx, event)
        failure: Exception = _ended_early(ctx)
    except Exception as exc:
        failure = exc
    finally:
        await _leave_stream(ctx, model_stream, events)
    return _stream_failed(ctx, failure)


stream = _handler(_stream)


def _complete(ctx: PhaseContext, event: MessageComplete) -> list[Event]:
    """Book the answer ``event`` completes (:func:`_accept`): the events that report it,
    those of the types a quiet run's watchers want (both ways of ``stream`` end here)."""
    response = _accept(ctx, event.response)
    scope = ctx.scope
    watched = scope.watched
    events: list[Event]
    if watched is None:
        events = [event, ModelResponseEvent(response, ctx.state.turns)]
    else:
        events = [event] if MessageComplete in watched else []
        if ModelResponseEvent in watched:
            events.append(ModelResponseEvent(response, ctx.state.turns))
    if response.usage.estimated and not scope.usage_estimated:  # said once a run
        scope.usage_estimated = True
        if watched is None or Alert in watched:
            events.append(_usage_alert(ctx, response.usage))
    return events


async def _streaming(ctx: PhaseContext) -> Events:
    """``stream`` for a run whose events are read: each stream event passed on."""
    scope = ctx.scope
    model_stream = scope.stream
    assert model_stream is not None, "stream runs after call opened one"
    partial, eager = _partial_output(ctx), ctx.params.eager_tools
    events = aiter(model_stream)  # closed here: left to the loop, each turn cost a task
    try:
        async for event in events:
            if isinstance(event, MessageComplete):
                if partial is not None and (delta := partial.finish()) is not None:
                    yield delta
                booked = _complete(ctx, event)
                scope.reporting = True  # an abort now must not lose the turn's events
                try:
                    for done in booked:
                        yield done
                finally:
                    scope.reporting = False
                return
            if eager:
                _start_early(ctx, event)
            yield event
            if partial is not None and (delta := partial.feed(event)) is not None:
                yield delta
        raise _ended_early(ctx)
    except Exception as exc:
        async with contextlib.aclosing(_stream_failed(ctx, exc)) as failed:
            async for reported in failed:
                yield reported
    finally:
        await _leave_stream(ctx, model_stream, events)


def _start_early(ctx: PhaseContext, event: object) -> None:
    """Start the call ``event`` completes now (the run starts tools eagerly)."""
    if (
        isinstance(event, ToolUseComplete)
        and not is_final_call(ctx, event.tool_use)
        and _not_offered(ctx, event.tool_use) is None
    ):
        ctx.deps.tools.prestart(_tool_scope(ctx), event.tool_use)


def _ended_early(ctx: PhaseContext) -> ProviderError:
    return ProviderError(
        ErrorCategory.TRANSIENT,
        "the stream ended without a final message",
        provider=ctx.choice.provider,
    )


async def _leave_stream(
    ctx: PhaseContext, model_stream: ModelStream, events: AsyncIterator[StreamEvent]
) -> None:
    scope = ctx.scope
    scope.stream = None
    await close_iterator(events)
    await model_stream.aclose()
    if scope.slot is not None:  # (a close that raises leaves it to the driver's end)
        scope.release_slot()


async def _stream_failed(ctx: PhaseContext, exc: Exception) -> Events:
    """A failure mid-stream: the calls started early are cancelled, the error booked."""
    await ctx.deps.tools.cancel_all()
    error = ProviderError.wrap(exc, ctx.choice.provider)
    yield ModelError(error, "stream")
    if error.category in _RATE:
        _gate_failure(ctx, error)  # overloaded mid-stream
    _record_failure(ctx, error)


def _results_message(
    ctx: PhaseContext, calls: Sequence[ToolUseBlock], results: Sequence[ToolCallResult]
) -> Message:
    """Tool results in call order, then any repeated-failure notices."""
    policy, failures = ctx.params.recovery, ctx.state.tool_failures
    blocks: list[Block] = [ToolResultBlock(r.tool_use_id, r.output, r.is_error) for r in results]
    for call_block, result in zip(calls, results, strict=True):
        name = call_block.name
        if is_final_call(ctx, call_block):  # not a tool of the run: never "failing"
            continue
        if result.is_error:
            count = failures.get(name, 0) + 1
            failures[name] = count
            if policy.tool_failure_threshold and count == policy.tool_failure_threshold:
                notice = policy.tool_failure_notice.format(name=name, count=count)
                blocks.append(TextBlock(notice))
        else:
            failures[name] = 0
    return Message("user", tuple(blocks))


def _aborted_message(results: Sequence[ToolCallResult]) -> Message:
    """The results of an aborted batch: the finished calls keep theirs."""
    return Message(
        "user", tuple(ToolResultBlock(r.tool_use_id, r.output, r.is_error) for r in results)
    )


async def execute_batch(ctx: PhaseContext, batch: ToolBatch) -> AsyncIterator[Event]:
    """Append a finished batch's results (and any repeated-failure notices) to the history.

    A cancelled batch is appended as it is, so the history stays valid. When an abort
    cancelled it, the calls that had finished are reported (``tool_executed``: a replay
    serves their results) and the run goes on to its abort; any other cancellation goes
    on."""
    async with contextlib.aclosing(_reporting(ctx, _book_batch(ctx, batch))) as reported:
        async for event in reported:
            yield event


async def _reporting(ctx: PhaseContext, events: Sequence[Event]) -> Events:
    """Yield ``events``, which report what a handler booked in the state: an abort waits
    until they are out (``scope.reporting``)."""
    ctx.scope.reporting = True
    try:
        for event in events:
            yield event
    finally:
        ctx.scope.reporting = False


def _book_batch(ctx: PhaseContext, batch: ToolBatch) -> list[Event]:
    """:func:`execute_batch`'s work, its events returned (no generator per turn)."""
    state = ctx.state
    calls = state.history[-1].tool_uses
    if batch.cancelled:
        state.history.append(_aborted_message(batch.results))
        done = [r for r in batch.results if r.error != "aborted"]
        if not done or state.abort is None:
            raise asyncio.CancelledError
        return [_executed(o) for o in done]
    message = _results_message(ctx, calls, batch.results)
    state.history.append(message)
    state.outcome = Outcome.EXECUTED
    events: list[Event] = [_executed(o) for o in batch.results]
    for notice in message.content[len(batch.results) :]:
        assert isinstance(notice, TextBlock)
        events.append(Alert("tool_failing", notice.text))
    return events


def _executed(r: ToolCallResult) -> ToolExecuted:
    return ToolExecuted(r.tool_use_id, r.name, r.is_error, r.timed_out, r.duration, r.output)


def _answered_here(ctx: PhaseContext, call: ToolUseBlock) -> ToolCallResult | None:
    """The result of a call that never reaches the tool runner: a final-result call made
    beside other calls (answered :data:`ALONE`), or a call to a tool not offered this
    turn; None for the others."""
    if is_final_call(ctx, call):
        return ToolCallResult(call.id, call.name, ALONE, is_error=True, error="not_alone")
    return _not_offered(ctx, call)


def _not_offered(ctx: PhaseContext, call: ToolUseBlock) -> ToolCallResult | None:
    """The error result of a call to a tool not offered this turn (None: offered, or the
    run offers every tool every turn)."""
    if ctx.scope.offered is None:
        return None
    from innerloop.fsm._offer import not_offered  # only for runs that choose tools

    return not_offered(ctx, call)


def _tool_scope(ctx: PhaseContext) -> ToolScope:
    """What the tool runner is given: ``ctx``, or a view of it with this turn's tools."""
    offered = ctx.scope.offered
    if offered is None:
        return ctx
    from innerloop.fsm._offer import tool_scope  # only for runs that choose tools

    return tool_scope(ctx, offered)


def _merged(
    calls: Sequence[ToolUseBlock],
    answered: Sequence[ToolCallResult | None],
    batch: ToolBatch,
) -> ToolBatch:
    """``batch`` (the results of the calls the runner ran) with the calls answered here
    put back, all in call order."""
    results = iter(batch.results)
    merged = [a if a is not None else next(results) for a in answered]
    return ToolBatch(tuple(merged), batch.cancelled)


async def _forwarding(
    ctx: PhaseContext, work: Awaitable[ToolBatch], ran: list[ToolBatch]
) -> AsyncGenerator[Event, None]:
    """Await ``work`` (the turn's tool calls) in a task of its own, yielding the events
    its tools emit meanwhile (:meth:`PhaseContext.emit`); its batch goes into ``ran``.

    An abort cancels the wait: the calls are cancelled (an agent tool aborts its child,
    which ends validly) and their cancelled batch is handed on as ``run_calls`` hands it.
    The run's reader leaving between two events closes this generator: the calls are
    stopped the same way and their results appended, so the history stays valid."""
    task = asyncio.ensure_future(work)
    try:
        async with contextlib.aclosing(relay(ctx.scope.side, task)) as relayed:
            async for event in relayed:
                yield event
        ran.append(task.result())
    except asyncio.CancelledError:
        task.cancel()
        ran.append(await task)  # a cancelled batch: execute_batch goes on cancelling
    finally:
        if not task.done():  # closed between two events (the reader left, or an abort)
            task.cancel()
            batch = await task
            ctx.state.history.append(_aborted_message(batch.results))


async def _execute(ctx: PhaseContext) -> Steps:
    """``execute``'s work (see :func:`_handler`): run the last assistant message's tool
    calls and append their results.

    A call that asks a question (``ToolContext.interrupt``) suspends the run; resumed
    here, the answer is that call's result and the finished calls keep theirs. A
    final-result call made beside other calls is not the answer (it never reaches the tool
    runner): it is answered with an error asking for it alone, after the others' results;
    so is a call to a tool not offered this turn (``params.prepare_tools``). When a tool
    emits events of its own (an agent tool), the generator it returns forwards them while
    the calls run."""
    calls = ctx.state.history[-1].tool_uses
    answered: Sequence[ToolCallResult | None] = ()  # none: every call goes to the runner
    own: Sequence[ToolUseBlock] = calls
    if ctx.params.final_result_tool or ctx.scope.offered is not None:
        answered = [_answered_here(ctx, c) for c in calls]
        own = [c for c, a in zip(calls, answered, strict=True) if a is None]
    resumed = ctx.resumed if ctx.state.interrupt is not None else None
    if resumed is not None and not resumed.path:
        return _booked(ctx, calls, answered, answered_batch(own, resumed))
    kept: Sequence[ToolResultBlock] = ()
    pending = own
    if resumed is not None:  # an agent tool's child asked: its call goes on, answered
        deliver_answer(ctx.state, resumed)
        kept = resumed.done
        ran_ids = {b.tool_use_id for b in kept}
        pending = [c for c in own if c.id not in ran_ids]
    work = ctx.deps.tools.run_calls(_tool_scope(ctx), pending)
    if ctx.scope.emits:  # an agent tool: its child's events come while the calls run
        return _forwarded(ctx, work, (calls, answered, own, kept))
    return _ran(ctx, (calls, answered, own, kept), await work)


execute = _handler(_execute)


_Turn = tuple[
    Sequence[ToolUseBlock],
    Sequence[ToolCallResult | None],
    Sequence[ToolUseBlock],
    Sequence[ToolResultBlock],
]
"""What ``execute`` knows of the turn's calls once they run: all of them, the results
answered without running them (None for the others; empty when none was), the calls
run, and the results kept from before a question (an agent tool's child asked)."""


async def _forwarded(ctx: PhaseContext, work: Awaitable[ToolBatch], turn: _Turn) -> Events:
    """``execute`` forwarding the events its tools emit while ``work`` runs."""
    ran: list[ToolBatch] = []
    async with contextlib.aclosing(_forwarding(ctx, work, ran)) as forwarded:
        async for event in forwarded:
            yield event
    async with contextlib.aclosing(_reporting(ctx, _ran(ctx, turn, ran[0]))) as reported:
        async for event in reported:
            yield event


def _ran(ctx: PhaseContext, turn: _Turn, batch: ToolBatch) -> list[Event]:
    """Book the ``batch`` the calls of ``turn`` ran, unless one of them asked a question."""
    calls, answered, own, kept = turn
    if kept:
        batch = with_kept(own, kept, batch)
    if suspend_for_questions(ctx, own, batch):
        return []
    return _booked(ctx, calls, answered, batch)


def _booked(
    ctx: PhaseContext,
    calls: Sequence[ToolUseBlock],
    answered: Sequence[ToolCallResult | None],
    batch: ToolBatch,
) -> list[Event]:
    """Book ``batch`` with the calls answered here put back (:func:`_book_batch`);
    ``answered`` is empty when none was."""
    if answered and any(a is not None for a in answered):
        batch = _merged(calls, answered, batch)
    return _book_batch(ctx, batch)


def _final_calls(ctx: PhaseContext) -> tuple[ToolUseBlock, ...]:
    """The final-result calls of the last response (all its calls, when ``check`` reads
    them: ``model_finished`` held)."""
    r = ctx.state.last_response
    return () if r is None else tuple(u for u in r.tool_uses if is_final_call(ctx, u))


def _answer(ctx: PhaseContext) -> str:
    """The answer as given: the last final-result call's input as JSON, or the text."""
    calls = _final_calls(ctx)
    if calls:
        return json.dumps(calls[-1].input, separators=(",", ":"))
    r = ctx.state.last_response
    if r is None:
        return ""
    return "".join(b.text for b in r.message.content if isinstance(b, TextBlock))


def _parse(ctx: PhaseContext, spec: OutputSpec) -> tuple[object, object]:
    """The typed answer and its data; :class:`InvalidOutput` when it has none."""
    calls = _final_calls(ctx)
    if calls:
        unreadable = unreadable_reason(calls[-1].input)
        if unreadable is not None:
            raise InvalidOutput([f"the {OUTPUT_TOOL} input could not be read ({unreadable})"])
        return spec.parse_data(calls[-1].input)
    if ctx.params.output_tool(ctx.choice.model):
        raise InvalidOutput([f"the answer was given as text, not through the {OUTPUT_TOOL} tool"])
    return spec.parse(_answer(ctx), ctx.params.max_json_depth)


def _check_output(ctx: PhaseContext, spec: OutputSpec) -> None:
    """Validate the final answer: ``state.output`` on success, the problems otherwise.
    Final-result calls are answered here, valid or not, so no way out of ``check`` leaves
    a call without its result."""
    state = ctx.state
    try:
        state.output, state.output_data = _parse(ctx, spec)
    except InvalidOutput as exc:
        state.output_problems = list(exc.problems)
        _answer_final_calls(ctx, spec.tool_repair_message(exc.problems), is_error=True)
        state.outcome = Outcome.OUTPUT_INVALID
        return
    state.output_problems = []
    _answer_final_calls(ctx, ACCEPTED, is_error=False)
    state.outcome = Outcome.CHECKED


def _answer_final_calls(ctx: PhaseContext, content: str, *, is_error: bool) -> None:
    calls = _final_calls(ctx)
    if calls:
        results = tuple(ToolResultBlock(c.id, content, is_error) for c in calls)
        ctx.state.history.append(Message("user", results))


async def check(ctx: PhaseContext) -> None:
    """Validate a final answer against ``params.output_type``, if set; the exit checks are
    the guards on this state's transitions."""
    spec = ctx.params.output_spec
    if spec is not None and model_finished(ctx):
        _check_output(ctx, spec)
        return
    ctx.state.outcome = Outcome.CHECKED


async def repair(ctx: PhaseContext) -> AsyncIterator[Event]:
    """Send the validation problems of the answer back to the model, as a user message
    (native structured output; a text answer where the final-result tool was asked for)
    or as the error result of the final-result call (``check`` wrote it); with no repair
    left, record the diagnostic the ``failed`` run ends with."""
    state, params = ctx.state, ctx.params
    spec = params.output_spec
    assert spec is not None, "repair follows an answer checked against output_type"
    problems = "; ".join(state.output_problems)
    if state.output_repairs >= params.max_output_repairs:
        reason = (
            f"the answer does not match output_type {spec.name} after "
            f"{state.output_repairs} repairs: {problems}"
        )
        state.diagnostic = {
            "reason": reason,
            "output_type": spec.name,
            "problems": list(state.output_problems),
            "answer": _answer(ctx),
            "repairs": state.output_repairs,
        }
        state.outcome = Outcome.OUTPUT_REJECTED
        yield Alert("output_rejected", reason)
        return
    state.output_repairs += 1
    if not _final_calls(ctx):
        text = (
            spec.prose_repair_message()
            if params.output_tool(ctx.choice.model)
            else spec.repair_message(state.output_problems)
        )
        _append_user_text(state.history, text)
    state.outcome = Outcome.REPAIRED
    yield Alert(
        "output_invalid",
        f"repair {state.output_repairs} of {params.max_output_repairs}: the answer does not "
        f"match output_type {spec.name}: {problems}",
    )


async def backoff(ctx: PhaseContext) -> AsyncIterator[Event]:
    """Wait before retrying a rate-limited call; Retry-After overrides the schedule."""
    state = ctx.state
    error = state.error
    retry_after = error.retry_after if error is not None else None
    state.backoff_attempts += 1
    jitter = jitter_fraction(ctx.deps.clock)
    delay = backoff_delay(ctx.params.recovery, state.rate_limit_failures, retry_after, jitter)
    yield Backoff(state.rate_limit_failures, delay, retry_after, state.total_wait + delay)
    await ctx.deps.clock.sleep(delay)
    state.total_wait += delay
    state.outcome = Outcome.WAITED


async def fallback(ctx: PhaseContext) -> AsyncIterator[Event]:
    """Switch to the next model in the chain; the history is re-normalized for it."""
    state = ctx.state
    before = ctx.choice
    reason = state.error.category.value if state.error is not None else "unknown"
    state.active += 1
    state.degraded = True
    state.rate_limit_failures = 0
    state.transient_failures = 0
    state.error = None
    after = ctx.choice
    state.outcome = Outcome.SWITCHED
    yield Fallback(before.provider, before.model, after.provider, after.model, reason)
    if ctx.params.server_tools or any(m.server_tools for m in state.history):
        from innerloop.fsm._offer import server_tools_alert  # only for runs with them

        dropped = server_tools_alert(ctx)
        if dropped is not None:
            yield dropped


def _close_history(state_history: list[Message]) -> None:
    """Give every unanswered tool call an error result, so the history stays valid."""
    if not state_history or state_history[-1].role != "assistant":
        return
    calls = state_history[-1].tool_uses
    if calls:
        state_history.append(
            Message("user", tuple(ToolResultBlock(c.id, ABORTED_TOOL, True) for c in calls))
        )


async def abort(ctx: PhaseContext) -> AsyncIterator[Event]:
    """Cancel in-flight work, close the history validly, record the diagnostic."""
    state, scope = ctx.state, ctx.scope
    await ctx.deps.tools.cancel_all()
    if scope.stream is not None:
        s, scope.stream = scope.stream, None
        await s.aclose()
    scope.release_slot()
    _close_history(state.history)
    if state.abort is not None:
        reason = state.abort.reason
        state.diagnostic = None
    else:
        error = state.error
        reason = str(error) if error is not None else "compaction could not shrink the history"
        payload = scope.request.payload if scope.request is not None else None
        state.diagnostic = build_diagnostic(
            error,
            payload,
            phase=str(state.outcome),
            provider=ctx.choice.provider,
            model=ctx.choice.model,
        )
        if error is None:
            state.diagnostic["reason"] = reason
    state.outcome = Outcome.ABORTED
    yield Abort(reason, state.diagnostic)
