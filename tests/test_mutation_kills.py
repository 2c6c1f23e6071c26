"""Behaviour that `make mutation` (bench/mutation.py) found untested: each test here kills
mutants that would reach users (a real backoff of zero, a finished model called again,
content left unhashed in a diagnostic, a budget under-counted, a route taken in the wrong
order, a default drifting, a raw body lost)."""

from __future__ import annotations

import asyncio
import collections.abc
import dataclasses
import hashlib
import json
import random
import re
import time
import typing
from collections.abc import Callable
from typing import Any

import attrs
import pytest

from innerloop import (
    DEFAULT_SPEC,
    HarnessParams,
    HarnessState,
    ImageBlock,
    Message,
    ModelResponse,
    SpendBudget,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    tool,
)
from innerloop._errors import ErrorCategory, ParamsError, ProviderError
from innerloop._events import Abort, Fallback, ModelCall
from innerloop.fsm import Outcome, Task
from innerloop.fsm import _default as default_module
from innerloop.fsm import _phases as phases
from innerloop.fsm._context import Deps, PhaseContext, TurnScope
from innerloop.fsm._guards import FINISHING_STOPS
from innerloop.providers._errors import (
    category_of,
    error_from_body,
    error_from_exception,
    error_from_status,
)
from innerloop.providers._fingerprint import request_fingerprint
from innerloop.providers._normalize import build_request, with_output_tool
from innerloop.recovery import RecoveryPolicy
from innerloop.recovery._clock import ScaledClock, SystemClock
from innerloop.recovery._compaction import (
    TruncatingCompactor,
    _trim_to_tokens,
    apply_cut,
    marker_text,
    plan_cut,
    render_transcript,
)
from innerloop.recovery._diagnostic import build_diagnostic
from innerloop.recovery._policy import backoff_delay, jitter_fraction
from innerloop.recovery._pricing import DEFAULT_PRICES, Price
from innerloop.recovery._tokens import (
    ApproxTokenCounter,
    MessageTokenCache,
    count_message,
    load_cl100k,
    message_text,
)
from innerloop.testing import machine_at, phase_context
from innerloop.testing._scripted import ScriptedProvider, reply
from innerloop.tools._runner import ToolRunner
from tests.fsm.test_transitions import MACHINE, _response, aborting, finished, opened, over_budget
from tests.fsm.test_transitions import PARAMS as BASE_PARAMS
from tests.fsm.test_transitions import tool_calls as wants_tools
from tests.fsm.test_transitions import turn_limit as turns_out

PARAMS = attrs.evolve(BASE_PARAMS, spend_budget=SpendBudget(max_tokens=1000, max_cost_usd=2.0))


def _sha(value: object) -> str:
    return "sha256:" + hashlib.sha256(repr(value).encode()).hexdigest()


# --- clocks ------------------------------------------------------------------------------


@pytest.fixture
def slept(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """What the clocks hand to asyncio.sleep (which still waits, for nothing)."""
    waits: list[float] = []
    real = asyncio.sleep

    async def record(seconds: float) -> None:
        waits.append(seconds)
        await real(0)

    monkeypatch.setattr(asyncio, "sleep", record)
    return waits


async def test_system_clock_waits_the_time_asked_and_never_a_negative_one(
    slept: list[float],
) -> None:
    clock = SystemClock()
    await clock.sleep(2.5)
    await clock.sleep(-3.0)
    await clock.sleep(0.0)
    assert slept == [2.5, 0.0, 0.0]


async def test_scaled_clock_scales_every_wait_and_never_a_negative_one(
    slept: list[float],
) -> None:
    clock = ScaledClock(0.25)
    await clock.sleep(8.0)
    await clock.sleep(-4.0)
    assert slept == [2.0, 0.0]


async def test_system_clock_really_waits() -> None:
    """The real clock, unpatched: a wait of 50 ms takes at least 50 ms (sleep never ends
    early, so this cannot flake under load)."""
    start = time.monotonic()
    await SystemClock().sleep(0.05)
    assert time.monotonic() - start >= 0.05


def test_scaled_clock_runs_its_monotonic_time_faster() -> None:
    clock = ScaledClock(0.5)
    before = time.monotonic()
    now = clock.monotonic()
    after = time.monotonic()
    assert before / 0.5 <= now <= after / 0.5
    assert before <= SystemClock().monotonic()


# --- recovery policy defaults -------------------------------------------------------------


def test_recovery_policy_defaults_are_the_documented_ones() -> None:
    policy = RecoveryPolicy()
    assert attrs.asdict(policy) == {
        "backoff_initial": 1.0,
        "backoff_factor": 2.0,
        "backoff_max": 64.0,
        "backoff_jitter": True,
        "max_retry_after": 300.0,
        "max_rate_limit_retries": 5,
        "transient_retries": 1,
        "tool_failure_threshold": 3,
        "max_tokens_compact_fraction": 0.6,
        "budget_compact_target": 0.7,
        "overflow_compact_target": 0.5,
        "keep_recent_messages": 4,
        "continuation_message": (
            "Your previous response was truncated. Continue from where you left off."
        ),
        "tool_failure_notice": (
            "Tool {name} has failed {count} consecutive times. "
            "Proceed without it or use an alternative approach."
        ),
    }


# --- finishing stop reasons ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("stop", "target"),
    [
        ("end_turn", "model_complete"),
        ("stop_sequence", "model_complete"),
        ("refusal", "model_complete"),
        ("pause_turn", "assemble"),
        ("tool_use", "assemble"),
        ("length", "assemble"),
    ],
)
def test_only_a_finishing_stop_reason_completes_the_run(stop: str, target: str) -> None:
    """A model that stopped on a stop sequence or refused is done; it is not called again
    until max_turns."""
    state = HarnessState()
    state.outcome = Outcome.RESPONSE
    state.last_response = _response(stop)
    assert machine_at(MACHINE, "check", state, PARAMS).step() == target


def test_the_finishing_stop_reasons_are_exactly_three() -> None:
    assert frozenset({"end_turn", "stop_sequence", "refusal"}) == FINISHING_STOPS


# --- the diagnostic -----------------------------------------------------------------------


def test_a_diagnostic_hashes_every_content_field_and_keeps_the_rest() -> None:
    call = {"name": "search", "arguments": '{"q": "secret"}'}
    use = {"type": "tool_use", "id": "t1", "input": {"q": "secret"}}
    payload = {
        "model": "m",
        "system": "be brief",
        "max_tokens": 10,
        "messages": [
            {"role": "user", "content": "hello"},
            {"role": "assistant", "content": [{"type": "text", "text": "hi"}, use]},
            {"role": "assistant", "tool_calls": [{"function": call}]},
            {"role": "user", "content": [{"type": "image", "data": "AAAA"}]},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "hmm"}]},
            {"role": "user", "content": None},
        ],
    }
    error = ProviderError(
        ErrorCategory.FATAL, "bad request", provider="p", status=400, raw='{"e": 1}'
    )
    diagnostic = build_diagnostic(error, payload, phase="call", provider="p", model="m")
    assert diagnostic["request"] == {
        "model": "m",
        "system": _sha("be brief"),
        "max_tokens": 10,
        "messages": [
            {"role": "user", "content": _sha("hello")},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": _sha("hi")},
                    {"type": "tool_use", "id": "t1", "input": _sha({"q": "secret"})},
                ],
            },
            {
                "role": "assistant",
                "tool_calls": [
                    {"function": {"name": "search", "arguments": _sha('{"q": "secret"}')}}
                ],
            },
            {"role": "user", "content": [{"type": "image", "data": _sha("AAAA")}]},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": _sha("hmm")}]},
            {"role": "user", "content": None},
        ],
    }
    assert "secret" not in json.dumps(diagnostic)
    assert diagnostic["raw_response"] == '{"e": 1}'
    assert diagnostic["error_message"] == str(error)
    assert (diagnostic["phase"], diagnostic["provider"], diagnostic["model"]) == ("call", "p", "m")


def test_a_diagnostic_without_an_error_or_a_request() -> None:
    assert build_diagnostic(None, None, phase="compact", provider="p", model="m") == {
        "phase": "compact",
        "provider": "p",
        "model": "m",
        "error": None,
        "error_message": None,
        "raw_response": None,
        "request": {},
    }
    empty_raw = ProviderError(ErrorCategory.FATAL, "x", provider="p", raw="")
    diagnostic = build_diagnostic(empty_raw, {}, phase="call", provider="p", model="m")
    assert diagnostic["raw_response"] is None


# --- the static token count ---------------------------------------------------------------


@tool
def lookup(term: str) -> str:
    """Look a term up."""
    return term


def _compact_json(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


def test_the_static_count_includes_the_system_prompt_and_every_tool_schema() -> None:
    counter = ApproxTokenCounter()
    cache = MessageTokenCache(counter)
    a = {"name": "a", "input_schema": {"type": "object", "properties": {"x": {}}}}
    b = {"name": "bb", "input_schema": {"type": "object"}}
    expected = (
        counter.count_text("a system prompt")
        + counter.count_text(_compact_json(a))
        + counter.count_text(_compact_json(b))
    )
    assert cache.count_static("a system prompt", [a, b]) == expected
    assert cache.count_static("", [a]) == counter.count_text(_compact_json(a))
    assert cache.count_static("", []) == 0
    tally = _Tally()
    MessageTokenCache(tally).count_static("sys", [a])
    assert tally.texts == [
        "sys",
        '{"name":"a","input_schema":{"type":"object","properties":{"x":{}}}}',
    ]


async def test_assemble_counts_the_tool_schemas_into_the_context() -> None:
    params = HarnessParams(
        model="scripted:m-20250101", system="be brief", tools=[lookup], context_budget=10_000
    )
    state = HarnessState()
    state.history = [Message.user("hello there")]
    ctx = phase_context(params, state)
    await phases.assemble(ctx)
    counter = ApproxTokenCounter()
    static = counter.count_text("be brief") + sum(
        counter.count_text(_compact_json(d)) for d in params.tool_definitions
    )
    assert ctx.scope.static_tokens == static
    assert state.context_tokens == static + ctx.deps.tokens.count_history(state.history)
    assert state.outcome == Outcome.ASSEMBLED


@dataclasses.dataclass(frozen=True)
class Verdict:
    ok: bool


async def test_assemble_counts_the_final_result_tool_beside_the_host_tools() -> None:
    params = HarnessParams(
        model="scripted:m-20250101",
        system="be brief",
        tools=[lookup],
        context_budget=10_000,
        output_type=Verdict,
        output_mode="tool",
    )
    assert params.final_result_tool
    state = HarnessState()
    ctx = phase_context(params, state)
    await phases.assemble(ctx)
    asked = with_output_tool(ctx.scope.settings)
    assert len(asked.tools) == 2
    counter = ApproxTokenCounter()
    assert ctx.scope.static_tokens == counter.count_text(asked.system) + sum(
        counter.count_text(_compact_json(d)) for d in (*params.tool_definitions, asked.tools[-1])
    )


# --- the order of the default spec --------------------------------------------------------


def _documented_order() -> dict[str, list[tuple[str, str | None]]]:
    """The table of ``_default.py``'s docstring: each state's exits, first wins."""
    doc = default_module.__doc__ or ""
    rows = doc.split("=\n", 2)[2].rsplit("\n=", 1)[0]
    table: dict[str, list[tuple[str, str | None]]] = {}
    state = ""
    for line in rows.splitlines():
        if line[:1].strip():
            state, line = line.split(maxsplit=1)
        for cell in filter(None, (c.strip() for c in line.split("·"))):
            target, _, guard = cell.partition(" ")
            table.setdefault(state, []).append((target, guard.strip("[]") or None))
    return table


def test_the_default_spec_takes_its_exits_in_the_documented_order() -> None:
    declared: dict[str, list[tuple[str, str | None]]] = {}
    for t in DEFAULT_SPEC.transitions:
        declared.setdefault(t.source, []).append((t.target, t.guard))
    assert declared == _documented_order()
    assert declared["call"][:2] == [("abort", "abort_requested"), ("stream", "call_opened")]


def test_the_default_spec_lists_states_and_transitions_as_documented() -> None:
    """The table's order is the declaration's, so diagrams and the table read alike."""
    table = _documented_order()
    flat = [(source, target, guard) for source, exits in table.items() for target, guard in exits]
    assert [(t.source, t.target, t.guard) for t in DEFAULT_SPEC.transitions] == flat
    assert [s.name for s in DEFAULT_SPEC.states if not s.final] == list(table)


def _spent(s: HarnessState) -> None:
    s.usage = Usage(900, 100)


def _invalid(s: HarnessState) -> None:
    s.outcome = Outcome.OUTPUT_INVALID


def _tasks_done(s: HarnessState) -> None:
    s.tasks = [Task("t", "a task", done=True)]


def _err(category: ErrorCategory) -> Callable[[HarnessState], None]:
    def setup(s: HarnessState) -> None:
        s.error = ProviderError(category, "boom", provider="scripted", status=500)
        s.rate_limit_failures = PARAMS.recovery.max_rate_limit_retries + 1
        s.transient_failures = 1

    return setup


ORDER_CASES: list[tuple[str, tuple[Callable[[HarnessState], None], ...], str, str | None]] = [
    ("assemble", (turns_out, over_budget), "max_turns_exceeded", "turn_limit"),
    ("assemble", (aborting, turns_out), "abort", "abort_requested"),
    ("call", (opened, aborting), "abort", "abort_requested"),
    ("call", (_err(ErrorCategory.OVERLOADED), opened), "stream", "call_opened"),
    ("check", (wants_tools, turns_out, _spent), "max_turns_exceeded", "turn_limit_continuing"),
    ("check", (wants_tools, _spent, aborting), "abort", "abort_requested"),
    ("check", (finished, _spent, _invalid), "budget_exceeded", "spend_exceeded"),
    ("check", (finished, _invalid), "repair", "output_invalid"),
    ("check", (finished, _tasks_done), "model_complete", "model_finished"),
    ("check", (wants_tools, _tasks_done), "tasks_complete", "tasks_complete"),
    ("stream", (_err(ErrorCategory.CONTEXT_OVERFLOW), aborting), "abort", "abort_requested"),
]


@pytest.mark.parametrize(
    ("source", "setups", "target", "guard"),
    ORDER_CASES,
    ids=[f"{s}->{t}[{g}]-{i}" for i, (s, _, t, g) in enumerate(ORDER_CASES)],
)
def test_when_two_guards_hold_the_first_declared_wins(
    source: str,
    setups: tuple[Callable[[HarnessState], None], ...],
    target: str,
    guard: str | None,
) -> None:
    state = HarnessState()
    for setup in setups:
        setup(state)
    probe = machine_at(MACHINE, source, state, PARAMS)
    chosen = probe.transition()
    assert (chosen.target, chosen.guard) == (target, guard)


# --- the boundaries of the guards ---------------------------------------------------------


def _at_check(setup: Callable[[HarnessState], None]) -> str:
    state = HarnessState()
    wants_tools(state)
    setup(state)
    return machine_at(MACHINE, "check", state, PARAMS).step()


def test_the_token_budget_is_spent_at_exactly_its_size() -> None:
    assert _at_check(lambda s: setattr(s, "usage", Usage(999, 0))) == "assemble"
    assert _at_check(lambda s: setattr(s, "usage", Usage(1000, 0))) == "budget_exceeded"


def test_the_dollar_budget_is_spent_at_exactly_its_size() -> None:
    assert _at_check(lambda s: setattr(s, "cost_usd", 1.99)) == "assemble"
    assert _at_check(lambda s: setattr(s, "cost_usd", 2.0)) == "budget_exceeded"


def test_the_budgets_count_from_the_runs_start() -> None:
    def resumed(s: HarnessState) -> None:
        s.usage, s.tokens_at_start = Usage(1500, 0), 600
        s.cost_usd, s.cost_at_start = 3.0, 1.5

    assert _at_check(resumed) == "assemble"


def _failed(category: ErrorCategory, **counters: int) -> Callable[[HarnessState], None]:
    def setup(s: HarnessState) -> None:
        s.error = ProviderError(category, "failed", provider="scripted")
        for name, value in counters.items():
            setattr(s, name, value)

    return setup


_RATE_RETRIES = PARAMS.recovery.max_rate_limit_retries
_TRANSIENT_RETRIES = PARAMS.recovery.transient_retries
BOUNDARY_CASES: list[tuple[str, Callable[[HarnessState], None], str]] = [
    ("assemble", lambda s: setattr(s, "context_tokens", 5000), "normalize"),
    ("assemble", lambda s: setattr(s, "context_tokens", 5001), "compact"),
    ("assemble", lambda s: setattr(s, "turns", 2), "normalize"),
    ("assemble", lambda s: setattr(s, "turns", 3), "max_turns_exceeded"),
    ("call", _failed(ErrorCategory.RATE_LIMITED, rate_limit_failures=_RATE_RETRIES), "backoff"),
    (
        "call",
        _failed(ErrorCategory.RATE_LIMITED, rate_limit_failures=_RATE_RETRIES + 1),
        "fallback",
    ),
    ("call", _failed(ErrorCategory.TRANSIENT, transient_failures=_TRANSIENT_RETRIES), "call"),
    (
        "call",
        _failed(ErrorCategory.TRANSIENT, transient_failures=_TRANSIENT_RETRIES + 1),
        "fallback",  # the endpoint is down and a fallback model is left
    ),
    (
        "call",
        _failed(
            ErrorCategory.TRANSIENT,
            transient_failures=_TRANSIENT_RETRIES + 1,
            active=len(PARAMS.model_chain) - 1,
        ),
        "abort",  # ... and on the last model of the chain, the run ends
    ),
]


@pytest.mark.parametrize(
    ("source", "setup", "target"),
    BOUNDARY_CASES,
    ids=[f"{s}->{t}-{i}" for i, (s, _, t) in enumerate(BOUNDARY_CASES)],
)
def test_each_limit_holds_at_exactly_its_value(
    source: str, setup: Callable[[HarnessState], None], target: str
) -> None:
    """The context budget is exceeded only past its size; the turn limit at max_turns;
    the last allowed retry is still a retry."""
    state = HarnessState()
    setup(state)
    assert machine_at(MACHINE, source, state, PARAMS).step() == target


# --- phases: fallback and a resumed call --------------------------------------------------


async def test_fallback_resets_the_retry_counters_and_switches_model() -> None:
    state = HarnessState()
    state.error = ProviderError(ErrorCategory.RATE_LIMITED, "slow", provider="scripted")
    state.rate_limit_failures = 6
    state.transient_failures = 1
    ctx = phase_context(PARAMS, state)
    events = [e async for e in phases.fallback(ctx)]
    assert events == [
        Fallback("scripted", "m-20250101", "scripted", "backup-20250101", "rate_limited")
    ]
    assert (state.active, state.rate_limit_failures, state.transient_failures) == (1, 0, 0)
    assert (ctx.state.error, state.degraded, state.outcome) == (None, True, Outcome.SWITCHED)


async def test_a_call_resumed_without_a_request_rebuilds_it() -> None:
    provider = ScriptedProvider([reply("hi")])
    deps = _scripted_deps(provider)
    state = HarnessState()
    state.history = [Message.user("resume me")]
    ctx = phase_context(PARAMS, state, deps)
    assert ctx.scope.request is None
    events = [e async for e in phases.call(ctx)]
    expected = build_request(ctx.scope.settings, state.history, "anthropic", "m-20250101")
    assert provider.requests == [expected]
    # its one event: the request's fingerprint, as a replay checks it
    assert len(events) == 1
    assert isinstance(events[0], ModelCall)
    call = events[0]
    assert (call.model, call.fingerprint, call.messages) == (
        "m-20250101",
        request_fingerprint(expected),
        1,
    )
    assert (state.outcome, state.error) == (Outcome.OPENED, None)
    assert ctx.scope.stream is not None
    await ctx.scope.stream.aclose()


# --- the error mapping --------------------------------------------------------------------


def test_a_status_error_keeps_its_raw_body() -> None:
    text = '{"error": {"type": "invalid_request_error", "message": "bad"}}'
    error = error_from_status("p", 400, {}, text)
    assert (error.category, str(error), error.raw) == (
        ErrorCategory.FATAL,
        "p HTTP 400 fatal: invalid_request_error: bad",
        text,
    )
    plain = error_from_status("p", 502, {}, "Bad Gateway")
    assert (plain.category, plain.raw) == (ErrorCategory.TRANSIENT, "Bad Gateway")


def test_a_parsed_body_without_its_text_is_kept_as_json() -> None:
    body = {"error": {"type": "overloaded_error", "message": "busy"}}
    error = error_from_body("p", body, status=529)
    assert (error.category, error.raw) == (ErrorCategory.OVERLOADED, json.dumps(body))
    assert error_from_body("p", None, status=500).raw is None


def test_an_sdk_status_error_keeps_its_raw_body() -> None:
    import httpx2

    text = '{"error": {"type": "rate_limit_error", "message": "slow down"}}'
    request = httpx2.Request("POST", "http://127.0.0.1/v1/messages")
    response = httpx2.Response(429, headers={"retry-after": "7"}, text=text, request=request)
    exc = httpx2.HTTPStatusError("429", request=request, response=response)
    error = error_from_exception("p", exc)
    assert (error.category, error.status, error.retry_after, error.raw) == (
        ErrorCategory.RATE_LIMITED,
        429,
        7.0,
        text,
    )


class _Unknown(Exception):
    pass


class _NotAnException(BaseException):
    pass


class _OddReset(ConnectionResetError):
    pass


def test_the_exception_table_falls_back_to_the_nearest_row_or_fatal() -> None:
    assert category_of(_Unknown("?")) is ErrorCategory.FATAL
    assert category_of(_NotAnException()) is ErrorCategory.FATAL  # no row at all
    assert category_of(_OddReset()) is ErrorCategory.TRANSIENT  # OSError's row
    assert category_of(FileNotFoundError()) is ErrorCategory.FATAL  # its own row
    assert category_of(TimeoutError()) is ErrorCategory.TRANSIENT
    error = error_from_exception("p", _Unknown("odd"), during="mid-stream")
    assert (error.category, str(error)) == (
        ErrorCategory.FATAL,
        "p fatal: mid-stream: _Unknown: odd",
    )


def test_secrets_in_a_raw_body_are_scrubbed() -> None:
    key = "sk-ant-" + "a" * 40
    error = error_from_status("p", 401, {}, f'{{"error": {{"message": "bad key {key}"}}}}')
    assert error.raw is not None
    assert key not in error.raw
    assert re.search(r"bad key \S+", error.raw)


# --- backoff --------------------------------------------------------------------------------


def test_the_backoff_schedule_doubles_from_one_second_up_to_its_cap() -> None:
    policy = RecoveryPolicy(backoff_jitter=False)
    delays = [backoff_delay(policy, attempt, None) for attempt in range(9)]
    assert delays == [1.0, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 64.0]


def test_a_retry_after_overrides_the_schedule_even_when_zero() -> None:
    policy = RecoveryPolicy()
    assert backoff_delay(policy, 4, 0.0) == 0.0
    assert backoff_delay(policy, 4, 12.5, jitter=0.1) == 12.5  # as given: no jitter
    assert backoff_delay(policy, 4, 301.0) == 300.0
    assert backoff_delay(policy, 2, -1.0, jitter=1.0) == 2.0  # not a wait: the schedule


@pytest.mark.parametrize(("jitter", "delay"), [(0.25, 1.0), (1.0, 4.0), (-2.0, 0.0), (3.0, 4.0)])
def test_full_jitter_takes_its_share_of_the_wait_clamped_to_0_and_1(
    jitter: float, delay: float
) -> None:
    assert backoff_delay(RecoveryPolicy(), 3, None, jitter) == delay
    assert backoff_delay(RecoveryPolicy(backoff_jitter=False), 3, None, jitter) == 4.0


def test_the_jitter_share_comes_from_the_clock_or_a_fresh_draw() -> None:
    class Seeded:
        def jitter(self) -> float:
            return 0.375

    assert jitter_fraction(Seeded()) == 0.375
    random.seed(22)
    expected = 1.0 - random.random()
    random.seed(22)
    assert jitter_fraction(object()) == expected


def test_policy_bounds_accept_zero_retries_and_an_equal_cap() -> None:
    policy = RecoveryPolicy(
        max_rate_limit_retries=0,
        transient_retries=0,
        tool_failure_threshold=0,
        keep_recent_messages=0,
        backoff_initial=5.0,
        backoff_max=5.0,
    )
    assert (policy.max_rate_limit_retries, policy.transient_retries) == (0, 0)
    with pytest.raises(ParamsError) as caught:
        RecoveryPolicy(backoff_initial=5.0, backoff_max=4.0)
    assert str(caught.value) == "recovery.backoff_max: must be >= backoff_initial (5), got 4"


@pytest.mark.parametrize(
    ("template", "problem"),
    [
        ("Tool {0} failed", "IndexError: Replacement index 0 out of range"),
        ("Tool {tool} failed", "KeyError: 'tool'"),
        ("Tool {name failed", "ValueError: expected '}' before end of string"),
        ("Tool {name.id} failed", "AttributeError: 'str' object has no attribute 'id'"),
    ],
)
def test_a_tool_failure_notice_with_other_placeholders_is_refused(
    template: str, problem: str
) -> None:
    with pytest.raises(ParamsError) as caught:
        RecoveryPolicy(tool_failure_notice=template)
    assert problem in str(caught.value)
    assert str(caught.value).startswith("recovery.tool_failure_notice: must be a template")


# --- the price table ------------------------------------------------------------------------

def test_the_default_table_prices_only_the_scripted_models() -> None:
    """Every other model is priced from genai-prices (tests/recovery/test_pricing.py)."""
    assert dict(DEFAULT_PRICES) == {"scripted": Price(0.0, 0.0)}  # scripted runs are free


# --- token counting -------------------------------------------------------------------------


class _Tally:
    """An approximate counter that also records each text it was asked to count."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def count_text(self, text: str) -> int:
        self.texts.append(text)
        return ApproxTokenCounter().count_text(text)


@pytest.mark.parametrize(("text", "tokens"), [("", 0), ("a", 1), ("abcd", 1), ("abcde", 2)])
def test_the_approximate_counter_takes_four_characters_a_token(text: str, tokens: int) -> None:
    assert ApproxTokenCounter().count_text(text) == tokens


def test_a_message_costs_its_framing_its_images_and_its_text() -> None:
    image = ImageBlock("image/png", "iVBORw0KGgo=")
    assert count_message(ApproxTokenCounter(), Message("user", (image,))) == 4 + 1600
    text = Message("user", (TextBlock("abcdefgh"), image, image))
    assert count_message(ApproxTokenCounter(), text) == 4 + 3200 + 2
    call = Message("assistant", (ToolUseBlock("t1", "find", {"q": 1, "r": [2]}),))
    assert list(message_text(call)) == ["find", '{"q":1,"r":[2]}']


@pytest.mark.parametrize(
    ("token", "rank"),
    [
        ("<|endoftext|>", 100257),
        ("<|fim_prefix|>", 100258),
        ("<|fim_middle|>", 100259),
        ("<|fim_suffix|>", 100260),
        ("<|endofprompt|>", 100276),
    ],
)
def test_the_offline_cl100k_knows_its_special_tokens(token: str, rank: int) -> None:
    assert load_cl100k().encode(token, allowed_special="all") == [rank]


def test_the_token_cache_counts_each_message_once_and_each_history_right() -> None:
    tally = _Tally()
    cache = MessageTokenCache(tally)
    a, b, c = Message.user("aaaa aaaa"), Message.user("bbbb"), Message.user("cc")
    assert cache.count(a) == cache.count(a) == 4 + 3
    assert tally.texts == ["aaaa aaaa"]
    assert cache.count_history([a, b]) == 7 + 5
    assert cache.count_history([a, b, c]) == 7 + 5 + 5
    assert tally.texts == ["aaaa aaaa", "bbbb", "cc"]
    assert cache.count_history([a]) == 7  # shorter: recounted from the cache
    assert cache.count_history([c, b]) == 10  # changed: likewise
    assert cache.count_history([c, b, a]) == 17
    assert tally.texts == ["aaaa aaaa", "bbbb", "cc"]
    cache.forget_missing([c])
    assert cache.count_history([a, b, c]) == 17
    assert tally.texts == ["aaaa aaaa", "bbbb", "cc", "aaaa aaaa", "bbbb"]


# --- compaction -----------------------------------------------------------------------------


def test_a_transcript_for_the_summarizer() -> None:
    history = [
        Message.user("hi"),
        Message(
            "assistant", (TextBlock("ok"), ToolUseBlock("t1", "search", {"q": "café", "n": 2}))
        ),
        Message("user", (ToolResultBlock("t1", "x" * 2001), ToolResultBlock("t2", "y" * 2000))),
        Message("assistant", (ThinkingBlock("private"), TextBlock(""))),
        Message("user", (ToolResultBlock("t1", "no", is_error=True),)),
    ]
    assert render_transcript(history) == (
        "USER:\nhi\n\n"
        'ASSISTANT:\nok\n[calls tool search with {"q":"café","n":2}]\n\n'
        f"USER:\n[tool result of search]: {'x' * 2000} [...]\n"
        f"[tool result of a tool]: {'y' * 2000}\n\n"
        "USER:\n[tool error of search]: no"
    )


@pytest.mark.parametrize(
    ("limit", "kept"),
    [
        (18, "abcdefghij" * 4),
        (17, "abcdefghij" * 3 + "abc [...]"),
        (12, "abcdefghijabc [...]"),
        (9, "a [...]"),
        (5, ""),
    ],
)
def test_a_summary_is_trimmed_to_its_token_limit(limit: int, kept: str) -> None:
    """The approximate counter: (29 header characters + the text + 3) // 4 tokens."""
    assert _trim_to_tokens("abcdefghij" * 4, limit, ApproxTokenCounter()) == kept


def _turns(n: int) -> list[Message]:
    return [
        Message.user(f"question {i} " * 3) if i % 2 == 0 else Message.assistant(f"answer {i}")
        for i in range(n)
    ]


def _fit(history: list[Message], cut: int) -> int:
    kept = apply_cut(history, cut, marker_text(cut, "budget"))
    return sum(count_message(ApproxTokenCounter(), m) for m in kept)


def test_the_smallest_cut_that_fits_exactly_wins() -> None:
    history = _turns(10)  # users at 0, 2, ..., 8; the cuts allowed: 2 and 4
    cache = MessageTokenCache(ApproxTokenCounter())
    assert _fit(history, 2) > _fit(history, 4)
    assert plan_cut(history, _fit(history, 2), cache) == 2
    assert plan_cut(history, _fit(history, 2) - 1, cache) == 4
    assert plan_cut(history, _fit(history, 4), cache) == 4
    assert plan_cut(history, 1, cache) == 4  # nothing fits: the largest allowed cut
    assert plan_cut(history, 1, cache, keep_recent=6) == 2
    assert plan_cut(history, 1, cache, keep_recent=0) == 6  # at least 2 kept, and the turn
    assert plan_cut(history[:4], 1, cache, keep_recent=0) == 0  # nothing may go
    assert plan_cut(_turns(11), 1, cache) == 6  # by default the newest 4 stay


def test_the_second_message_may_open_the_kept_history() -> None:
    u, a = Message.user("question"), Message.assistant("answer")
    history = [u, Message.user("more"), a, u, a, u, a]
    cache = MessageTokenCache(ApproxTokenCounter())
    assert plan_cut(history, 10_000, cache, keep_recent=2, keep_task=False) == 1
    assert plan_cut(history, 10_000, cache, keep_recent=2) == 3  # at 1 only the task went


def test_the_summary_follows_the_marker_in_the_first_kept_message() -> None:
    history = [Message.user("a"), Message.assistant("b"), Message.user("c"), Message.user("d")]
    assert apply_cut(history, 2, "MARK", "it went well", keep_task=False) == (
        Message(
            "user",
            (
                TextBlock("MARK"),
                TextBlock("Summary of the removed part:\nit went well"),
                TextBlock("c"),
            ),
        ),
        Message.user("d"),
    )


def test_no_response_yet_is_not_a_finished_model() -> None:
    state = HarnessState()
    assert machine_at(MACHINE, "check", state, PARAMS).step() == "assemble"
    state = HarnessState()
    turns_out(state)
    assert machine_at(MACHINE, "check", state, PARAMS).step() == "max_turns_exceeded"


def _scripted_deps(provider: ScriptedProvider) -> Deps:
    return Deps(
        providers={"scripted": provider},
        clock=SystemClock(),
        tokens=MessageTokenCache(ApproxTokenCounter()),
        compactor=TruncatingCompactor(),
        fallback_compactor=TruncatingCompactor(),
        tools=ToolRunner(),
    )


@pytest.mark.parametrize(("named", "booked"), [("", "m-20250101"), ("m-2025-06", "m-2025-06")])
def test_an_accepted_response_books_its_model_and_resets_the_retries(
    named: str, booked: str
) -> None:
    state = HarnessState()
    state.rate_limit_failures, state.transient_failures = 2, 1
    ctx = phase_context(PARAMS, state)
    response = ModelResponse(Message.assistant("hi"), "end_turn", Usage(10, 5), named)
    phases._accept(ctx, response)
    assert state.resolved_models == [booked]
    assert (state.turns, state.usage, state.rate_limit_failures, state.transient_failures) == (
        1,
        Usage(10, 5),
        0,
        0,
    )


def phase_scope(ctx: PhaseContext) -> TurnScope:
    return ctx.scope


async def test_abort_closes_the_open_stream() -> None:
    provider = ScriptedProvider([reply("hi")])
    state = HarnessState()
    state.history = [Message.user("go")]
    state.request_abort("host said stop")
    ctx = phase_context(PARAMS, state, _scripted_deps(provider))
    ctx.scope.stream = await provider.open(
        build_request(ctx.scope.settings, state.history, "anthropic", "m-20250101")
    )
    events = [e async for e in phases.abort(ctx)]
    assert events == [Abort("host said stop", None)]
    assert (phase_scope(ctx).stream, state.outcome) == (None, Outcome.ABORTED)


@pytest.mark.parametrize(
    "message",
    [
        "prompt is too long: 210000 tokens",
        "context_length_exceeded",
        "This model's maximum context length is 128000 tokens",
        "the input exceeds the context window",
        "Input is too long for requested model.",
    ],
)
def test_every_overflow_wording_is_a_context_overflow(message: str) -> None:
    error = error_from_status("p", 400, {}, json.dumps({"error": {"message": message}}))
    assert error.category is ErrorCategory.CONTEXT_OVERFLOW


def test_an_error_given_as_a_bare_string_keeps_its_message() -> None:
    error = error_from_body("p", {"error": "quota gone"}, status=403)
    assert (error.category, str(error)) == (ErrorCategory.FATAL, "p HTTP 403 fatal: quota gone")


def test_amazons_error_type_header_names_the_category() -> None:
    header = {"X-Amzn-ErrorType": "ThrottlingException:http://internal.amazon.com/coral/"}
    error = error_from_status("bedrock", 400, header, "{}")
    assert error.category is ErrorCategory.RATE_LIMITED


# --- the checkpoint writer --------------------------------------------------------------------


def _writer_store() -> tuple[Any, Any]:
    from innerloop.checkpoint import CheckpointWriter, MemoryCheckpointer

    store = MemoryCheckpointer()
    store.create_run("r", "innerloop")
    return store, CheckpointWriter(store, "r")


def test_only_lists_and_dicts_are_compared_by_value() -> None:
    """The codec compares the fields that may change in place (lists, dicts, optional
    ones) by value, the rest by identity; a tuple of lists is a tuple, not a list."""
    from innerloop.checkpoint import _writer as writer

    assert [writer._NAMES[i] for i in writer._MUTABLE] == [
        "tasks",
        "errors",
        "tool_failures",
        "resolved_models",
        "diagnostic",
        "output_problems",
        "notes",
    ]
    assert writer._holds_container(list[int])
    assert writer._holds_container(dict[str, int])
    assert writer._holds_container(dict[str, int] | None)
    assert writer._holds_container(typing.Optional[list[int]])  # noqa: UP045
    assert not writer._holds_container(int | None)
    assert not writer._holds_container(tuple[list[int], ...])
    assert not writer._holds_container(collections.abc.Mapping[str, list[int]])


def test_a_value_equal_but_of_another_type_is_written() -> None:
    """``True == 1``: a field typed Any that turns from 1 to True is stored as True."""
    from innerloop.checkpoint import decode

    store, writer = _writer_store()
    state = HarnessState(history=[Message.user("go")])
    state.output_data = 1
    writer.save(state, "check")
    state.output_data = True
    writer.save(state, "check")
    back = decode(store.rows("r")).state
    assert back.output_data is True


def test_a_step_that_changed_nothing_is_an_empty_delta() -> None:
    """A new object equal to the old one (a cost recomputed) is not a change: the
    checkpoint stores ``{}``; a real change is stored as ``set``."""
    store, writer = _writer_store()
    state = HarnessState(history=[Message.user("go")])
    state.cost_usd, state.turns = 0.25, 1000
    writer.save(state, "check")
    state.cost_usd, state.turns = float("0.25"), int("1000")
    writer.save(state, "assemble")
    state.turns += 1
    writer.save(state, "check")
    rows = store.rows("r")
    assert [text for _, text in rows.data[1:]] == ["{}", '{"set":{"turns":1001}}']


def test_a_row_that_is_not_an_object_is_a_corrupt_checkpoint() -> None:
    """A state row holding a JSON array (a TypeError while reading) is
    ``CheckpointCorrupt`` naming the checkpoint, never a bare TypeError."""
    from innerloop.checkpoint import CheckpointCorrupt, decode

    store, writer = _writer_store()
    writer.save(HarnessState(history=[Message.user("go")]), "check")
    rows = store.rows("r")
    broken = attrs.evolve(rows, data=[(1, "[1, 2]")])
    with pytest.raises(CheckpointCorrupt) as caught:
        decode(broken)
    assert str(caught.value) == (
        "checkpoint 1 of run 'r' cannot be read: TypeError: checkpoint 1 holds JSON list, "
        "not an object; the row was left as it is"
    )


def test_a_list_of_scalars_is_copied_shallowly(monkeypatch: pytest.MonkeyPatch) -> None:
    """The codec's copy of a list or dict of JSON scalars (str, int, float, bool, None)
    is a shallow one: no deep copy at each checkpoint; a list holding a dict is copied
    deeply, so changing the dict later is seen."""
    from innerloop.checkpoint import _writer as writer

    def refused(value: object, memo: object = None) -> object:
        raise AssertionError(f"deep copy of {value!r}")

    scalars = ["s", 1, 1.5, True, None]
    with monkeypatch.context() as patch:
        patch.setattr("innerloop.checkpoint._writer.copy.deepcopy", refused)
        assert writer._snapshot(scalars) == scalars
        assert writer._snapshot(scalars) is not scalars
        assert writer._snapshot(dict(enumerate(scalars))) == dict(enumerate(scalars))
    nested: list[object] = [{"a": 1}]
    copied = writer._snapshot(nested)
    assert copied == nested
    assert copied[0] is not nested[0]


def test_a_whole_checkpoint_every_64() -> None:
    """Checkpoints 1, 65 and 129 are whole; reading any one reads at most 64 rows."""
    from innerloop.checkpoint._writer import FULL_EVERY

    store, writer = _writer_store()
    state = HarnessState(history=[Message.user("go")])
    chains = []
    for turn in range(130):
        state.turns = turn
        writer.save(state, "check")
        chains.append(len(store.rows("r").data))
    assert FULL_EVERY == 64
    assert [seq for seq, n in enumerate(chains, start=1) if n == 1] == [1, 65, 129]
    assert max(chains) == 64


def test_a_failed_write_goes_back_to_the_last_committed_segment() -> None:
    """A write that fails once (a full disk) rolls the writer back to its last committed
    checkpoint: after a compaction started a segment at message 3, the next segment
    starts after it again, so every checkpoint reads back its own history."""
    from innerloop.checkpoint import CheckpointError, CheckpointWriter, MemoryCheckpointer, decode

    class Flaky(MemoryCheckpointer):
        fail = False

        def write(self, checkpoints: Any) -> None:
            if self.fail:
                self.fail = False
                raise CheckpointError("disk full")
            super().write(checkpoints)

    store = Flaky()
    store.create_run("r", "innerloop")
    writer = CheckpointWriter(store, "r")
    first = [Message.user("u0"), Message.assistant("a0"), Message.user("u1")]
    state = HarnessState(history=list(first))
    writer.save(state, "check")
    second = [Message.user("summary"), first[2]]
    state.history = list(second)
    writer.save(state, "check")
    state.history.append(Message.assistant("a1"))
    store.fail = True
    with pytest.raises(CheckpointError, match="disk full"):
        writer.save(state, "check")
    third = [Message.user("summary 2")]
    state.history = list(third)
    writer.save(state, "check")
    histories = [decode(store.rows("r", seq)).state.history for seq in (1, 2, 3)]
    assert histories == [first, second, third]
    assert [(i.history_start, i.history_len) for i in store.checkpoints("r")] == [
        (0, 3),
        (3, 2),
        (5, 1),
    ]
