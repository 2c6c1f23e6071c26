"""Phase handlers of the default machine, one function per state (same name).

A handler does the phase's work and records its outcome in ``run.state``; it never picks
the next state (the guards do). Handlers return a list of events or yield them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

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
    ModelResponseEvent,
    ToolExecuted,
    ToolUseComplete,
)
from innerloop._messages import (
    Block,
    Message,
    ModelResponse,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)
from innerloop.fsm._driver import Run
from innerloop.fsm._params import HarnessParams
from innerloop.providers._normalize import build_request
from innerloop.recovery._compaction import CompactionRequest, CompactionResult
from innerloop.recovery._diagnostic import build_diagnostic
from innerloop.recovery._policy import backoff_delay
from innerloop.recovery._pricing import add_cost, price_for

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
    "stream",
]

ABORTED_TOOL = "not run: the run was aborted before this tool call completed"


async def idle(run: Run) -> None:
    run.state.outcome = "started"


def _unpriced_alert(params: HarnessParams, models: Sequence[str]) -> list[Event]:
    """An alert when a dollar spend budget cannot fire because a model has no price."""
    budget = params.spend_budget
    if budget is None or budget.max_cost_usd is None:
        return []
    missing = [m for m in dict.fromkeys(models) if price_for(m, params.prices) is None]
    if not missing:
        return []
    names = ", ".join(missing)
    return [
        Alert(
            "unpriced_model",
            f"no price for {names} in params.prices: the run's dollar cost is unknown, so "
            "spend_budget.max_cost_usd cannot end the run; add prices with "
            f"HarnessParams(prices=merge_prices({{{missing[0]!r}: Price(input, output)}}))",
        )
    ]


async def assemble(run: Run) -> list[Event]:
    """Count the request: system prompt and tools once per run, history incrementally."""
    events: list[Event] = []
    if run.static_tokens is None:
        run.static_tokens = run.tokens.count_static(run.params.system, run.params.tool_definitions)
        events += _unpriced_alert(run.params, [c.model for c in run.params.model_chain])
    state = run.state
    if run.params.context_budget is None:
        # nothing to compare against: skip tokenizing (compaction counts what it needs)
        state.outcome = "assembled"
        return events
    state.context_tokens = run.static_tokens + run.tokens.count_history(state.history)
    # an exact counter (RequestTokenCounter) also counts the whole wire request; looked up
    # by attribute, as a runtime Protocol check costs tens of microseconds per turn
    count_request = getattr(run.tokens.counter, "count_request", None)
    if count_request is not None:
        request = build_request(run.params, state.history, run.provider.dialect, run.choice.model)
        exact = await count_request(request)
        if exact is not None:
            state.context_tokens = exact
    state.outcome = "assembled"
    return events


def _compaction_reason(run: Run) -> str:
    state = run.state
    if state.error is not None and state.error.category is ErrorCategory.CONTEXT_OVERFLOW:
        return "overflow"
    if state.outcome == "response" and state.last_response is not None:
        if state.last_response.stop_reason == "max_tokens":
            return "max_tokens"
    return "budget"


async def _run_compactor(
    run: Run, request: CompactionRequest
) -> tuple[CompactionResult, Exception | None]:
    """The run's compactor; if it fails, the deterministic fallback and the failure."""
    try:
        return await run.compactor.compact(request, run.tokens), None
    except Exception as exc:  # a failing summarizer must not lose the run: fall back
        return await run.fallback_compactor.compact(request, run.tokens), exc


def _append_user_text(history: list[Message], text: str) -> None:
    """Add ``text`` as user input, keeping user/assistant alternation."""
    if history and history[-1].role == "user":
        last = history[-1]
        history[-1] = Message("user", (*last.content, TextBlock(text)))
    else:
        history.append(Message.user(text))


async def compact(run: Run) -> AsyncIterator[Event]:
    """Shrink history for one of three reasons: budget, max_tokens or overflow."""
    state, params, policy = run.state, run.params, run.params.recovery
    reason = _compaction_reason(run)
    history = tuple(state.history)
    before = run.tokens.count_history(history)
    static = run.static_tokens or 0
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
        await run.tool_runner.cancel_all()
        target = int(before * (1 - policy.max_tokens_compact_fraction))
    else:
        assert params.context_budget is not None
        target = int(params.context_budget * policy.budget_compact_target * scale) - static
    request = CompactionRequest(history, max(target, 0), reason, policy.keep_recent_messages)
    result, failure = await _run_compactor(run, request)
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
            for alert in _unpriced_alert(params, [result.model]):
                yield alert
    state.history = list(result.history)
    if reason == "max_tokens":
        _append_user_text(state.history, policy.continuation_message)
    run.tokens.forget_missing(state.history)
    after = run.tokens.count_history(state.history)
    shrank = result.removed > 0 and after < before
    state.error = None
    state.compaction_reason = reason
    state.outcome = "compacted" if shrank or reason == "max_tokens" else "cannot_shrink"
    yield Compacted(reason, before + static, after + static, result.removed)


async def normalize(run: Run) -> None:
    """Pure ``build_request`` for the active provider's wire format."""
    choice = run.choice
    run.state.request = build_request(
        run.params, run.state.history, run.provider.dialect, choice.model
    )
    run.state.outcome = "normalized"


def _record_failure(run: Run, error: ProviderError) -> None:
    state = run.state
    state.error = error
    state.count_error(error.category.value)
    if error.category in (ErrorCategory.RATE_LIMITED, ErrorCategory.OVERLOADED):
        state.rate_limit_failures += 1
    elif error.category is ErrorCategory.TRANSIENT:
        state.transient_failures += 1
    state.outcome = "failed"


async def call(run: Run) -> None:
    """Open the streaming request."""
    state = run.state
    state.error = None
    try:
        state.stream = await run.provider.open(state.request)
    except Exception as exc:
        _record_failure(run, ProviderError.wrap(exc, run.choice.provider))
        return
    state.outcome = "opened"


def _accept(run: Run, response: ModelResponse) -> ModelResponse:
    """Book a complete response: counters, cost, and the assistant message in history."""
    state, params = run.state, run.params
    state.turns += 1
    state.usage = state.usage + response.usage
    model = response.model or run.choice.model
    state.resolved_models.append(model)
    state.cost_usd = add_cost(state.cost_usd, response.usage, model, params.prices)
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
    if message.content:
        state.history.append(message)
    state.last_response = response
    state.outcome = "response"
    return response


async def stream(run: Run) -> AsyncIterator[Event]:
    """Consume the stream: forward its events, start eager tools, book the response."""
    state = run.state
    model_stream = state.stream
    eager = run.params.eager_tools
    quiet = run.quiet
    completed = False
    try:
        async for event in model_stream:
            if isinstance(event, MessageComplete):
                response = _accept(run, event.response)
                completed = True
                yield event
                yield ModelResponseEvent(response, state.turns)
                break
            if eager and isinstance(event, ToolUseComplete):
                run.tool_runner.prestart(run, event.tool_use)
            if not quiet:
                yield event
        if not completed:
            raise ProviderError(
                ErrorCategory.TRANSIENT,
                "the stream ended without a final message",
                provider=run.choice.provider,
            )
    except Exception as exc:
        await run.tool_runner.cancel_all()
        _record_failure(run, ProviderError.wrap(exc, run.choice.provider))
    finally:
        state.stream = None
        await model_stream.aclose()


def _results_message(
    run: Run, calls: Sequence[ToolUseBlock], results: Sequence[ToolResultBlock]
) -> Message:
    """Tool results in call order, then any repeated-failure notices."""
    policy = run.params.recovery
    blocks: list[Block] = list(results)
    for call_block, result in zip(calls, results, strict=True):
        name = call_block.name
        if result.is_error:
            count = run.state.tool_failures.get(name, 0) + 1
            run.state.tool_failures[name] = count
            if policy.tool_failure_threshold and count == policy.tool_failure_threshold:
                notice = policy.tool_failure_notice.format(name=name, count=count)
                blocks.append(TextBlock(notice))
        else:
            run.state.tool_failures[name] = 0
    return Message("user", tuple(blocks))


async def execute(run: Run) -> AsyncIterator[Event]:
    """Run the last assistant message's tool calls and append their results."""
    state = run.state
    calls = state.history[-1].tool_uses
    try:
        outcomes = await run.tool_runner.run_calls(run, calls)
    except asyncio.CancelledError:
        # an abort: calls that finished keep their results, the others say they were aborted
        done = {o.tool_use_id: o for o in getattr(run.tool_runner, "finished_results", ())}
        if done:
            blocks = tuple(
                ToolResultBlock(c.id, done[c.id].output, done[c.id].is_error)
                if c.id in done
                else ToolResultBlock(c.id, ABORTED_TOOL, True)
                for c in calls
            )
            state.history.append(Message("user", blocks))
        raise
    results = [ToolResultBlock(o.tool_use_id, o.output, o.is_error) for o in outcomes]
    message = _results_message(run, calls, results)
    state.history.append(message)
    state.outcome = "executed"
    for o in outcomes:
        yield ToolExecuted(o.tool_use_id, o.name, o.is_error, o.timed_out, o.duration, o.output)
    for notice in message.content[len(results) :]:
        assert isinstance(notice, TextBlock)
        yield Alert("tool_failing", notice.text)


async def check(run: Run) -> None:
    """Nothing to do: the exit checks are the guards on this state's transitions."""
    run.state.outcome = "checked"


async def backoff(run: Run) -> AsyncIterator[Event]:
    """Wait before retrying a rate-limited call; Retry-After overrides the schedule."""
    state = run.state
    error = state.error
    retry_after = error.retry_after if error is not None else None
    state.backoff_attempts += 1
    delay = backoff_delay(run.params.recovery, state.rate_limit_failures, retry_after)
    yield Backoff(state.rate_limit_failures, delay, retry_after, state.total_wait + delay)
    await run.clock.sleep(delay)
    state.total_wait += delay
    state.outcome = "waited"


async def fallback(run: Run) -> AsyncIterator[Event]:
    """Switch to the next model in the chain; the history is re-normalized for it."""
    state = run.state
    before = run.choice
    reason = state.error.category.value if state.error is not None else "unknown"
    state.active += 1
    state.degraded = True
    state.rate_limit_failures = 0
    state.transient_failures = 0
    state.error = None
    after = run.choice
    state.outcome = "switched"
    yield Fallback(before.provider, before.model, after.provider, after.model, reason)


def _close_history(state_history: list[Message]) -> None:
    """Give every unanswered tool call an error result, so the history stays valid."""
    if not state_history or state_history[-1].role != "assistant":
        return
    calls = state_history[-1].tool_uses
    if calls:
        state_history.append(
            Message("user", tuple(ToolResultBlock(c.id, ABORTED_TOOL, True) for c in calls))
        )


async def abort(run: Run) -> AsyncIterator[Event]:
    """Cancel in-flight work, close the history validly, record the diagnostic."""
    state = run.state
    await run.tool_runner.cancel_all()
    if state.stream is not None:
        s, state.stream = state.stream, None
        await s.aclose()
    _close_history(state.history)
    if state.abort.requested:
        reason = state.abort.reason
        state.diagnostic = None
    else:
        error = state.error
        reason = str(error) if error is not None else "compaction could not shrink the history"
        payload = state.request.payload if state.request is not None else None
        state.diagnostic = build_diagnostic(
            error,
            payload,
            phase=state.outcome,
            provider=run.choice.provider,
            model=run.choice.model,
        )
        if error is None:
            state.diagnostic["reason"] = reason
    state.outcome = "aborted"
    yield Abort(reason, state.diagnostic)
