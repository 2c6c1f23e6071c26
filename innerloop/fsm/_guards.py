"""The default machine's guards: pure predicates over a phase context's params and state.
No I/O, no clock.

Each declares with :func:`~innerloop.fsm.guard` the fields it reads and the budget it
bounds. The budgets, and what bounds their counters (``compile_spec`` proves from them that
every loop of the machine ends; see ``_bounds.py``):

* ``turns``: ``state.turns`` (one per accepted model response) against ``params.max_turns``;
  exhausted by ``turn_limit`` (``assemble``) and ``turn_limit_continuing`` (``check``);
* ``rate_limit_retries``: ``state.rate_limit_failures`` (one per rate-limited or overloaded
  call) against ``params.recovery.max_rate_limit_retries``; spent by ``rate_limited_retry``;
* ``transient_retries``: ``state.transient_failures`` against
  ``params.recovery.transient_retries``; spent by ``transient_retry``;
* ``fallbacks``: ``state.active`` (one more per switch) against the model chain; spent by
  ``rate_limited_fallback`` and ``transient_fallback``;
* ``repairs``: ``state.output_repairs`` against ``params.max_output_repairs`` (the repair
  state counts and says ``OUTPUT_REJECTED`` past it); exhausted by ``output_rejected``;
* ``compactions``: the history, which every compaction shrinks or else says
  ``CANNOT_SHRINK``; exhausted by ``cannot_shrink``.

The retry counters are reset when a response is accepted (a turn) or the model switches (a
fallback): by the cycles ``turns`` and ``fallbacks`` bound.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from innerloop._errors import ErrorCategory
from innerloop._messages import ToolUseBlock
from innerloop.fsm._context import PhaseContext
from innerloop.fsm._guardinfo import guard
from innerloop.fsm._output import OUTPUT_TOOL
from innerloop.fsm._spec import Guard
from innerloop.fsm._state import Outcome

__all__ = ["DEFAULT_GUARDS", "is_final_call"]

_RATE = (ErrorCategory.RATE_LIMITED, ErrorCategory.OVERLOADED)
FINISHING_STOPS = frozenset({"end_turn", "stop_sequence", "refusal"})


@guard(reads=("state.abort",), given="state.abort")
def abort_requested(ctx: PhaseContext) -> bool:
    """The host asked the run to stop."""
    return ctx.state.abort is not None


@guard(reads=("state.outcome",))
def interrupted(ctx: PhaseContext) -> bool:
    """The phase paused the run for an answer from outside (``ctx.interrupt``)."""
    return ctx.state.outcome == Outcome.INTERRUPTED


@guard(reads=("state.turns", "state.turns_at_start", "params.max_turns"), exhausts="turns")
def turn_limit(ctx: PhaseContext) -> bool:
    """No model turn is left (``max_turns`` counts this run's turns)."""
    params, state = ctx.params, ctx.state
    return state.turns - state.turns_at_start >= params.max_turns


@guard(reads=("params.context_budget", "state.context_tokens"), given="params.context_budget")
def over_context_budget(ctx: PhaseContext) -> bool:
    """The assembled request is larger than the context budget."""
    params, state = ctx.params, ctx.state
    return params.context_budget is not None and state.context_tokens > params.context_budget


@guard(reads=("state.outcome",), exhausts="compactions")
def cannot_shrink(ctx: PhaseContext) -> bool:
    """Compaction could not remove anything."""
    return ctx.state.outcome == Outcome.CANNOT_SHRINK


@guard(reads=("state.outcome",))
def call_opened(ctx: PhaseContext) -> bool:
    """The streaming request was accepted."""
    return ctx.state.outcome == Outcome.OPENED


@guard(
    reads=("state.error", "state.rate_limit_failures", "params.recovery.max_rate_limit_retries"),
    spends="rate_limit_retries",
    given="state.error",
)
def rate_limited_retry(ctx: PhaseContext) -> bool:
    """Rate limited or overloaded, with backoff retries left on this model."""
    params, state = ctx.params, ctx.state
    return (
        state.error is not None
        and state.error.category in _RATE
        and state.rate_limit_failures <= params.recovery.max_rate_limit_retries
    )


@guard(
    reads=("state.error", "state.active", "params.model_chain"),
    spends="fallbacks",
    given="state.error",
)
def rate_limited_fallback(ctx: PhaseContext) -> bool:
    """Rate limited with retries exhausted, and a fallback model left in the chain."""
    params, state = ctx.params, ctx.state
    return (
        state.error is not None
        and state.error.category in _RATE
        and state.active + 1 < len(params.model_chain)
    )


@guard(
    reads=("state.error", "state.transient_failures", "params.recovery.transient_retries"),
    spends="transient_retries",
    given="state.error",
)
def transient_retry(ctx: PhaseContext) -> bool:
    """A transient failure (5xx, malformed, empty, dropped) with an immediate retry left."""
    params, state = ctx.params, ctx.state
    return (
        state.error is not None
        and state.error.category is ErrorCategory.TRANSIENT
        and state.transient_failures <= params.recovery.transient_retries
    )


@guard(
    reads=("state.error", "state.active", "params.model_chain"),
    spends="fallbacks",
    given="state.error",
)
def transient_fallback(ctx: PhaseContext) -> bool:
    """A transient failure (a refused, reset or dropped connection, a 5xx, a timeout) with
    its retries spent, and a fallback model left in the chain: the endpoint is down."""
    params, state = ctx.params, ctx.state
    return (
        state.error is not None
        and state.error.category is ErrorCategory.TRANSIENT
        and state.active + 1 < len(params.model_chain)
    )


@guard(reads=("state.error",), given="state.error")
def context_overflow(ctx: PhaseContext) -> bool:
    """The provider said the prompt is too long: our count was wrong."""
    state = ctx.state
    return state.error is not None and state.error.category is ErrorCategory.CONTEXT_OVERFLOW


@guard(reads=("state.error",), given="state.error")
def failed(ctx: PhaseContext) -> bool:
    """The call or stream failed (and no recovery branch above took it)."""
    state = ctx.state
    return state.error is not None


@guard(reads=("state.outcome", "state.last_response"))
def truncated(ctx: PhaseContext) -> bool:
    """The model hit max_tokens: compact, then ask it to continue."""
    state = ctx.state
    return (
        state.outcome == Outcome.RESPONSE
        and state.last_response is not None
        and state.last_response.stop_reason == "max_tokens"
    )


def is_final_call(ctx: PhaseContext, call: ToolUseBlock) -> bool:
    """``call`` gives the typed answer through the final-result tool (a model of the chain
    is asked for it; the name is then reserved)."""
    return call.name == OUTPUT_TOOL and ctx.params.final_result_tool


@guard(reads=("state.pending_tool_uses", "state.history", "params.final_result_tool"))
def has_tool_calls(ctx: PhaseContext) -> bool:
    """The last assistant message asks for tools (other than a final-result call)."""
    state = ctx.state
    if not state.pending_tool_uses:
        return False
    return not _all_final(ctx, state.history[-1].tool_uses)


def _all_final(ctx: PhaseContext, calls: Sequence[ToolUseBlock]) -> bool:
    """Every one of ``calls`` is a final-result call (:func:`is_final_call`)."""
    for call in calls:
        if call.name != OUTPUT_TOOL:
            return False
    return not calls or ctx.params.final_result_tool


@guard(reads=("state.last_response", "params.final_result_tool"))
def model_finished(ctx: PhaseContext) -> bool:
    """The model ended its turn without asking for tools, or gave its answer through the
    final-result tool (and called no other tool)."""
    state = ctx.state
    r = state.last_response
    if r is None:
        return False
    if not r.tool_uses:
        return r.stop_reason in FINISHING_STOPS
    return _all_final(ctx, r.tool_uses)


@guard(
    reads=(
        "state.turns",
        "state.turns_at_start",
        "params.max_turns",
        "state.last_response",
        "params.final_result_tool",
    ),
    exhausts="turns",
)
def turn_limit_continuing(ctx: PhaseContext) -> bool:
    """The turn limit is reached while the model still wants to go on."""
    return turn_limit(ctx) and not model_finished(ctx)


@guard(
    reads=(
        "params.spend_budget",
        "state.usage",
        "state.tokens_at_start",
        "state.cost_usd",
        "state.cost_at_start",
    ),
    given="params.spend_budget",
)
def spend_exceeded(ctx: PhaseContext) -> bool:
    """The run has spent its token or dollar budget (counted from the run's start)."""
    params, state = ctx.params, ctx.state
    budget = params.spend_budget
    if budget is None:
        return False
    if (
        budget.max_tokens is not None
        and state.usage.total_tokens - state.tokens_at_start >= budget.max_tokens
    ):
        return True
    return (
        budget.max_cost_usd is not None
        and state.cost_usd is not None
        and state.cost_usd - state.cost_at_start >= budget.max_cost_usd
    )


@guard(reads=("state.outcome",))
def output_invalid(ctx: PhaseContext) -> bool:
    """The final answer does not match ``params.output_type``."""
    return ctx.state.outcome == Outcome.OUTPUT_INVALID


@guard(reads=("state.outcome",), exhausts="repairs")
def output_rejected(ctx: PhaseContext) -> bool:
    """The answer is still invalid and no repair is left."""
    return ctx.state.outcome == Outcome.OUTPUT_REJECTED


@guard(reads=("state.tasks",))
def tasks_complete(ctx: PhaseContext) -> bool:
    """There are tasks and every one is done."""
    state = ctx.state
    return bool(state.tasks) and all(t.done for t in state.tasks)


DEFAULT_GUARDS: Mapping[str, Guard] = {
    g.__name__: g
    for g in (
        abort_requested,
        interrupted,
        turn_limit,
        over_context_budget,
        cannot_shrink,
        call_opened,
        rate_limited_retry,
        rate_limited_fallback,
        transient_retry,
        transient_fallback,
        context_overflow,
        failed,
        truncated,
        has_tool_calls,
        model_finished,
        turn_limit_continuing,
        spend_exceeded,
        output_invalid,
        output_rejected,
        tasks_complete,
    )
}
