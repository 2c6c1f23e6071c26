"""One test per declared transition of the default machine: craft a state, step once."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from innerloop import (
    DEFAULT_SPEC,
    HarnessParams,
    HarnessState,
    Message,
    ModelResponse,
    SpendBudget,
    TextBlock,
    ToolUseBlock,
    Usage,
    compile_spec,
)
from innerloop._errors import ErrorCategory, ProviderError
from innerloop.fsm import Outcome, Task
from innerloop.testing import TransitionCoverage, machine_at

MACHINE = compile_spec(DEFAULT_SPEC)
PARAMS = HarnessParams(
    model="scripted:m-20250101",
    fallbacks=["scripted:backup-20250101"],
    max_turns=3,
    max_output_tokens=1000,
    context_budget=5000,
    spend_budget=SpendBudget(max_tokens=1000),
)


def _err(category: ErrorCategory) -> ProviderError:
    return ProviderError(category, "boom", provider="scripted", status=500)


def _response(stop: str, *, tools: bool = False) -> ModelResponse:
    blocks: tuple[TextBlock | ToolUseBlock, ...] = (TextBlock("hi"),)
    if tools:
        blocks += (ToolUseBlock("t1", "echo", {}),)
    return ModelResponse(Message("assistant", blocks), stop)


def interrupted(s: HarnessState) -> None:
    s.outcome = Outcome.INTERRUPTED


def aborting(s: HarnessState) -> None:
    s.request_abort("test abort")


def turn_limit(s: HarnessState) -> None:
    s.turns = PARAMS.max_turns


def over_budget(s: HarnessState) -> None:
    s.context_tokens = 6000


def cannot_shrink(s: HarnessState) -> None:
    s.outcome = Outcome.CANNOT_SHRINK


def opened(s: HarnessState) -> None:
    s.outcome = Outcome.OPENED


def rate_limited(s: HarnessState) -> None:
    s.error = _err(ErrorCategory.RATE_LIMITED)
    s.rate_limit_failures = 1


def overloaded_exhausted(s: HarnessState) -> None:
    s.error = _err(ErrorCategory.OVERLOADED)
    s.rate_limit_failures = PARAMS.recovery.max_rate_limit_retries + 1


def transient_first(s: HarnessState) -> None:
    s.error = _err(ErrorCategory.TRANSIENT)
    s.transient_failures = 1


def transient_exhausted(s: HarnessState) -> None:
    s.error = _err(ErrorCategory.TRANSIENT)
    s.transient_failures = PARAMS.recovery.transient_retries + 1


def overflow(s: HarnessState) -> None:
    s.error = _err(ErrorCategory.CONTEXT_OVERFLOW)


def fatal(s: HarnessState) -> None:
    s.error = _err(ErrorCategory.FATAL)


def truncated(s: HarnessState) -> None:
    s.outcome = Outcome.RESPONSE
    s.last_response = _response("max_tokens")


def tool_calls(s: HarnessState) -> None:
    s.outcome = Outcome.RESPONSE
    s.last_response = _response("tool_use", tools=True)
    s.history = [Message.user("go"), s.last_response.message]


def finished(s: HarnessState) -> None:
    s.outcome = Outcome.RESPONSE
    s.last_response = _response("end_turn")


def limit_while_continuing(s: HarnessState) -> None:
    tool_calls(s)
    s.turns = PARAMS.max_turns


def spent(s: HarnessState) -> None:
    tool_calls(s)
    s.usage = Usage(900, 100)


def tasks_done(s: HarnessState) -> None:
    tool_calls(s)
    s.tasks = [Task("t1", "write", done=True)]


def output_invalid(s: HarnessState) -> None:
    finished(s)
    s.outcome = Outcome.OUTPUT_INVALID


def output_rejected(s: HarnessState) -> None:
    s.outcome = Outcome.OUTPUT_REJECTED


def nothing(s: HarnessState) -> None:
    return None


CASES: list[tuple[str, Callable[[HarnessState], None], str, str | None]] = [
    ("idle", nothing, "assemble", None),
    ("assemble", aborting, "abort", "abort_requested"),
    ("assemble", turn_limit, "max_turns_exceeded", "turn_limit"),
    ("assemble", over_budget, "compact", "over_context_budget"),
    ("assemble", nothing, "normalize", None),
    ("compact", aborting, "abort", "abort_requested"),
    ("compact", cannot_shrink, "abort", "cannot_shrink"),
    ("compact", nothing, "assemble", None),
    ("normalize", nothing, "call", None),
    ("call", aborting, "abort", "abort_requested"),
    ("call", opened, "stream", "call_opened"),
    ("call", rate_limited, "backoff", "rate_limited_retry"),
    ("call", overloaded_exhausted, "fallback", "rate_limited_fallback"),
    ("call", transient_first, "call", "transient_retry"),
    ("call", transient_exhausted, "fallback", "transient_fallback"),
    ("call", overflow, "compact", "context_overflow"),
    ("call", fatal, "abort", None),
    ("stream", aborting, "abort", "abort_requested"),
    ("stream", rate_limited, "backoff", "rate_limited_retry"),
    ("stream", overloaded_exhausted, "fallback", "rate_limited_fallback"),
    ("stream", transient_first, "call", "transient_retry"),
    ("stream", transient_exhausted, "fallback", "transient_fallback"),
    ("stream", overflow, "compact", "context_overflow"),
    ("stream", fatal, "abort", "failed"),
    ("stream", truncated, "compact", "truncated"),
    ("stream", tool_calls, "execute", "has_tool_calls"),
    ("stream", finished, "check", None),
    ("execute", aborting, "abort", "abort_requested"),
    ("execute", interrupted, "suspended", "interrupted"),
    ("execute", nothing, "check", None),
    ("check", aborting, "abort", "abort_requested"),
    ("check", limit_while_continuing, "max_turns_exceeded", "turn_limit_continuing"),
    ("check", spent, "budget_exceeded", "spend_exceeded"),
    ("check", output_invalid, "repair", "output_invalid"),
    ("check", finished, "model_complete", "model_finished"),
    ("check", tasks_done, "tasks_complete", "tasks_complete"),
    ("check", tool_calls, "assemble", None),
    ("repair", aborting, "abort", "abort_requested"),
    ("repair", output_rejected, "failed", "output_rejected"),
    ("repair", nothing, "assemble", None),
    ("backoff", aborting, "abort", "abort_requested"),
    ("backoff", nothing, "call", None),
    ("fallback", nothing, "normalize", None),
    ("abort", aborting, "aborted", "abort_requested"),
    ("abort", fatal, "failed", None),
]


@pytest.mark.parametrize(
    ("source", "setup", "target", "guard"),
    CASES,
    ids=[f"{s}->{t}[{g or '-'}]" for s, _, t, g in CASES],
)
def test_transition(
    source: str,
    setup: Callable[[HarnessState], None],
    target: str,
    guard: str | None,
    transition_coverage: TransitionCoverage,
) -> None:
    """The crafted state makes the machine take exactly this transition."""
    state = HarnessState()
    setup(state)
    probe = machine_at(MACHINE, source, state, PARAMS, observers=[transition_coverage])
    chosen = probe.transition()
    assert (chosen.target, chosen.guard) == (target, guard)
    assert probe.step() == target
    assert probe.current == target


def test_every_declared_transition_has_a_case() -> None:
    """The table above lists every transition of the default spec exactly once."""
    declared = [(t.source, t.target, t.guard) for t in DEFAULT_SPEC.transitions]
    listed = [(s, t, g) for s, _, t, g in CASES]
    assert sorted(declared, key=str) == sorted(listed, key=str)


def test_rate_limit_without_fallback_left_aborts() -> None:
    """Rate-limit retries exhausted on the last model of the chain: the call aborts."""
    params = HarnessParams(model="scripted:m-20250101")
    state = HarnessState()
    state.error = _err(ErrorCategory.RATE_LIMITED)
    state.rate_limit_failures = params.recovery.max_rate_limit_retries + 1
    assert machine_at(MACHINE, "call", state, params).step() == "abort"


def test_second_transient_failure_on_the_last_model_aborts() -> None:
    """Only one immediate retry: the second consecutive transient failure on the last
    model of the chain aborts."""
    state = HarnessState()
    state.error = _err(ErrorCategory.TRANSIENT)
    state.transient_failures = 2
    state.active = 1
    assert machine_at(MACHINE, "call", state, PARAMS).step() == "abort"


def test_turn_limit_does_not_hide_a_finished_model() -> None:
    """A model that finishes on its last allowed turn completes; it is not a limit exit."""
    state = HarnessState()
    finished(state)
    state.turns = PARAMS.max_turns
    assert machine_at(MACHINE, "check", state, PARAMS).step() == "model_complete"
