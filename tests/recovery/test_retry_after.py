"""Extreme Retry-After values: refused when not finite, capped by
``RecoveryPolicy.max_retry_after``; past the cap the run falls back or fails quoting the
header, and the shared gate is never held for longer than its ``max_hold``."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from innerloop import HarnessParams
from innerloop._errors import ErrorCategory, ParamsError, ProviderError
from innerloop.lowlevel import parse_retry_after
from innerloop.providers import AnthropicProvider, OpenAIProvider
from innerloop.recovery import RateLimitGate, RateLimitGates, RecoveryPolicy
from innerloop.recovery._policy import backoff_delay, refused_wait
from innerloop.testing import AnthropicServer, FakeClock, OpenAIServer, Raw, reply

EXTREME = [
    ("retry-after", "inf"),
    ("retry-after", "1e400"),
    ("retry-after", "nan"),
    ("retry-after-ms", "1e308"),
    ("retry-after-ms", "inf"),
    ("retry-after", "3600"),
]
BODY = json.dumps(
    {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}
).encode()
SERVERS = {
    "anthropic": (AnthropicServer, AnthropicProvider),
    "openai": (OpenAIServer, OpenAIProvider),
}


def _error(header: tuple[str, str]) -> ProviderError:
    name, value = header
    return ProviderError(
        ErrorCategory.RATE_LIMITED,
        "slow down",
        retry_after=parse_retry_after({name: value}),
        retry_after_header=f"{name}: {value}",
    )


class TestParse:
    @pytest.mark.parametrize(
        "headers",
        [
            {"retry-after": "inf"},
            {"retry-after": "1e400"},
            {"retry-after": "-inf"},
            {"retry-after": "nan"},
            {"retry-after-ms": "inf", "retry-after": "9"},
        ],
    )
    def test_a_wait_that_is_not_finite_is_refused(self, headers: dict[str, str]) -> None:
        """No header value becomes an infinite (or NaN) wait."""
        assert parse_retry_after(headers) is None

    def test_a_huge_finite_wait_stays_finite(self) -> None:
        """``retry-after-ms: 1e308`` is 1e305 s: finite, for the policy to refuse."""
        seconds = parse_retry_after({"retry-after-ms": "1e308"})
        assert seconds == pytest.approx(1e305)
        assert math.isfinite(seconds or 0)


class TestPolicy:
    @pytest.mark.parametrize("header", EXTREME)
    def test_past_the_cap_is_refused_quoting_the_header(self, header: tuple[str, str]) -> None:
        """Every extreme value is refused, and the reason quotes the header as sent."""
        reason = refused_wait(RecoveryPolicy(), _error(header))
        assert reason is not None
        assert f"'{header[0]}: {header[1]}'" in reason
        assert "recovery.max_retry_after is 300 s" in reason

    def test_within_the_cap_is_taken(self) -> None:
        """A wait up to the cap, an unreadable header and no header are not refused."""
        policy = RecoveryPolicy(max_retry_after=60.0)
        assert refused_wait(policy, _error(("retry-after", "60"))) is None
        assert refused_wait(policy, _error(("retry-after", "soon"))) is None
        assert refused_wait(policy, ProviderError(ErrorCategory.RATE_LIMITED, "x")) is None
        assert refused_wait(policy, _error(("retry-after", "61"))) is not None

    def test_default_cap_is_five_minutes_and_must_be_finite(self) -> None:
        """The default is 300 s; an infinite cap is refused with the field named."""
        assert RecoveryPolicy().max_retry_after == 300.0
        with pytest.raises(ParamsError, match=r"recovery.max_retry_after: must be a finite"):
            RecoveryPolicy(max_retry_after=math.inf)

    def test_backoff_never_exceeds_the_cap(self) -> None:
        """The backoff rule itself ignores a non-finite wait and caps a long one."""
        policy = RecoveryPolicy(backoff_jitter=False, max_retry_after=30.0)
        assert backoff_delay(policy, 1, 1e305) == 30.0
        assert backoff_delay(policy, 1, math.inf) == 1.0
        assert backoff_delay(policy, 1, math.nan) == 1.0


class TestGate:
    @pytest.mark.parametrize("wait", [math.inf, math.nan, 1e305])
    def test_a_retry_after_holds_the_gate_for_max_hold_at_most(self, wait: float) -> None:
        """No value holds the shared gate past ``max_hold`` (non-finite ones not at all)."""
        gate = RateLimitGate(failures=5, max_hold=120.0)
        gate.failure(10.0, wait)
        held = gate.admit(10.0).wait
        assert held == (120.0 if math.isfinite(wait) else 0.0)
        assert gate.admit(130.0).wait == 0.0

    def test_the_circuit_cannot_be_held_forever(self) -> None:
        """An open circuit lasts the cool-down, or the capped hold, never longer."""
        gate = RateLimitGate(failures=1, cooldown=5.0, max_hold=60.0)
        gate.failure(0.0, 1e305)
        assert gate.admit(0.0).wait == 60.0
        assert gate.admit(60.0).probe

    @pytest.mark.parametrize("name", ["cooldown", "max_cooldown", "probe_timeout", "max_hold"])
    def test_infinite_settings_are_refused(self, name: str) -> None:
        """Every duration of the gate must be finite."""
        settings: dict[str, Any] = {name: math.inf}
        with pytest.raises(ParamsError, match=rf"gate.{name}: must be a finite number > 0"):
            RateLimitGates(**settings)


def _run(
    dialect: str, header: tuple[str, str], fallbacks: tuple[str, ...], make_harness: Any
) -> tuple[Any, list[Any], list[str], RateLimitGate]:
    server_cls, provider_cls = SERVERS[dialect]
    raw = Raw(429, (("content-type", "application/json"), header), BODY)
    gates = RateLimitGates()
    params = HarnessParams(model=f"{dialect}:model-a", fallbacks=fallbacks)
    with server_cls([raw, reply("done")]) as server:
        provider = provider_cls(api_key="sk-test-key-000000000000", base_url=server.base_url)
        events: list[Any] = []
        harness = make_harness(params, {dialect: provider}, gates=gates)
        state = harness.run_sync("hi", on_event=events.append)
        models = [str(r.body.get("model")) for r in server.requests]
    return state, events, models, gates.gate(provider, "model-a")


@pytest.mark.parametrize("header", EXTREME)
@pytest.mark.parametrize("dialect", ["anthropic", "openai"])
class TestThroughTheSDK:
    def test_past_the_cap_falls_back_at_once(
        self, dialect: str, header: tuple[str, str], make_harness: Any, clock: FakeClock
    ) -> None:
        """With a fallback left, the run switches without waiting, and holds no one."""
        state, events, models, gate = _run(dialect, header, (f"{dialect}:model-b",), make_harness)
        assert state.exit_reason == "model_complete"
        assert [e.type for e in events if e.type in ("backoff", "fallback")] == ["fallback"]
        assert models == ["model-a", "model-b"]
        assert clock.monotonic() == 0.0
        assert gate.admit(0.0).wait == 0.0  # model-a's gate lets the next run go at once

    def test_past_the_cap_without_fallback_fails_quoting_the_header(
        self, dialect: str, header: tuple[str, str], make_harness: Any, clock: FakeClock
    ) -> None:
        """Alone, the run fails at once with a diagnostic that quotes the header."""
        state, events, models, _ = _run(dialect, header, (), make_harness)
        assert state.exit_reason == "failed"
        assert [e.type for e in events if e.type == "backoff"] == []
        assert models == ["model-a"]
        assert clock.monotonic() == 0.0
        diagnostic = state.diagnostic
        assert diagnostic is not None
        assert f"'{header[0]}: {header[1]}'" in diagnostic["error_message"]
        assert diagnostic["error"]["retry_after_header"] == f"{header[0]}: {header[1]}"
        assert diagnostic["error"]["retry_after"] is None
