"""The shared rate-limit gate, backoff jitter, and runs that share a gate."""

from __future__ import annotations

from typing import Any

import pytest

from innerloop import HarnessParams, Message
from innerloop._errors import ParamsError
from innerloop._events import Backoff, Event, Fallback
from innerloop.recovery import Admission, RateLimitGate, RateLimitGates, RecoveryPolicy
from innerloop.recovery._policy import backoff_delay, jitter_fraction
from innerloop.testing import FakeClock, Fault, Reply, ScriptedProvider, reply


def _state(gate: RateLimitGate) -> str:
    return gate.state  # read afresh (mypy would narrow the property between reads)


class TestRateLimitGate:
    def test_closed_gate_admits_at_once(self) -> None:
        """A fresh gate lets every call go."""
        gate = RateLimitGate()
        assert gate.admit(0.0) == Admission()
        assert _state(gate) == "closed"

    def test_retry_after_holds_every_caller(self) -> None:
        """A 429 with a wait holds new calls until then, circuit still closed."""
        gate = RateLimitGate(failures=5)
        gate.failure(10.0, 4.0)
        assert gate.admit(11.0) == Admission(3.0)
        assert gate.admit(14.0) == Admission()
        assert _state(gate) == "closed"

    def test_opens_after_k_consecutive_failures(self) -> None:
        """The K-th failure in a row opens the circuit for the cool-down."""
        gate = RateLimitGate(failures=3, cooldown=10.0)
        gate.failure(0.0, None)
        gate.failure(0.0, None)
        assert _state(gate) == "closed"
        gate.failure(1.0, None)
        assert _state(gate) == "open"
        assert gate.admit(2.0) == Admission(9.0, circuit_open=True)

    def test_success_resets_the_count(self) -> None:
        """A success between failures means they were not consecutive."""
        gate = RateLimitGate(failures=2)
        gate.failure(0.0, None)
        gate.success()
        gate.failure(0.0, None)
        assert _state(gate) == "closed"

    def test_one_half_open_probe_then_close(self) -> None:
        """After the cool-down one probe goes, the others wait; its success closes."""
        gate = RateLimitGate(failures=1, cooldown=10.0)
        gate.failure(0.0, None)
        assert gate.admit(10.0) == Admission(probe=True)
        assert _state(gate) == "half_open"
        assert gate.admit(10.5) == Admission(1.0, circuit_open=True)
        gate.success()
        assert _state(gate) == "closed"
        assert gate.admit(10.6) == Admission()
        assert (gate.opened, gate.probes) == (1, 1)

    def test_failed_probe_reopens_for_twice_the_cooldown(self) -> None:
        """A failed probe opens the circuit again, the cool-down doubled up to the cap."""
        gate = RateLimitGate(failures=1, cooldown=10.0, max_cooldown=30.0)
        gate.failure(0.0, None)
        assert gate.admit(10.0).probe
        gate.failure(10.0, None)
        assert gate.admit(10.0) == Admission(20.0, circuit_open=True)
        assert gate.admit(30.0).probe
        gate.failure(30.0, None)
        assert gate.admit(30.0) == Admission(30.0, circuit_open=True)

    def test_late_failures_do_not_extend_an_open_circuit(self) -> None:
        """Failures of calls sent before the circuit opened leave its cool-down alone."""
        gate = RateLimitGate(failures=1, cooldown=10.0)
        gate.failure(0.0, None)
        gate.failure(5.0, None)
        assert gate.admit(10.0).probe

    def test_cooldown_lasts_at_least_the_retry_after(self) -> None:
        """A Retry-After longer than the cool-down keeps the circuit open until then."""
        gate = RateLimitGate(failures=1, cooldown=10.0)
        gate.failure(0.0, 25.0)
        assert gate.admit(0.0) == Admission(25.0, circuit_open=True)

    def test_released_probe_lets_another_go(self) -> None:
        """A probe that ended with another error frees the half-open slot."""
        gate = RateLimitGate(failures=1, cooldown=1.0)
        gate.failure(0.0, None)
        assert gate.admit(1.0).probe
        gate.release()
        assert gate.admit(1.0).probe

    def test_lost_probe_times_out(self) -> None:
        """A probe never heard of is replaced after probe_timeout."""
        gate = RateLimitGate(failures=1, cooldown=1.0, probe_timeout=5.0)
        gate.failure(0.0, None)
        assert gate.admit(1.0).probe
        assert gate.admit(6.0).probe

    def test_bad_settings_say_the_fix(self) -> None:
        """Settings are checked at construction, naming the field."""
        with pytest.raises(ParamsError, match=r"gate.failures.*consecutive failures"):
            RateLimitGate(failures=0)
        with pytest.raises(ParamsError, match=r"gate.cooldown: must be a finite number > 0"):
            RateLimitGates(cooldown=-1)


class TestRateLimitGates:
    def test_one_gate_per_provider_object_and_model(self) -> None:
        """Providers without an SDK client are keyed by the object and the model."""
        gates = RateLimitGates()
        a, b = ScriptedProvider([]), ScriptedProvider([])
        assert gates.gate(a, "m") is gates.gate(a, "m")
        assert gates.gate(a, "m") is not gates.gate(a, "n")
        assert gates.gate(a, "m") is not gates.gate(b, "m")

    def test_sdk_providers_share_by_base_url(self) -> None:
        """Two provider objects on the same API endpoint share one gate."""

        class Client:
            base_url = "http://127.0.0.1:9/v1/"

        class Endpoint:
            name = "openai"
            client = Client()

        gates = RateLimitGates()
        assert gates.gate(Endpoint(), "gpt") is gates.gate(Endpoint(), "gpt")


class TestJitter:
    def test_full_jitter_scales_the_computed_wait(self) -> None:
        """The computed wait is multiplied by the draw; Retry-After is taken as given."""
        policy = RecoveryPolicy()
        assert backoff_delay(policy, 3, None, 0.25) == 1.0
        assert backoff_delay(policy, 3, 7.0, 0.25) == 7.0

    def test_jitter_off(self) -> None:
        """backoff_jitter=False keeps the schedule as written."""
        policy = RecoveryPolicy(backoff_jitter=False)
        assert backoff_delay(policy, 3, None, 0.25) == 4.0

    def test_fake_clock_seeds_the_draws(self) -> None:
        """A seeded FakeClock draws the same jitter each time; unseeded it draws 1.0."""
        assert jitter_fraction(FakeClock()) == 1.0
        first = [jitter_fraction(FakeClock(seed=7)) for _ in range(2)]
        assert first[0] == first[1]
        assert 0.0 < first[0] <= 1.0

    def test_system_draws_stay_in_range(self) -> None:
        """A clock without ``jitter`` gets fresh draws in (0, 1]."""
        draws = {jitter_fraction(object()) for _ in range(50)}
        assert len(draws) > 1
        assert all(0.0 < d <= 1.0 for d in draws)


SYSTEM = "You are a test agent."


def params(**kw: Any) -> HarnessParams:
    base: dict[str, Any] = {"model": "scripted:m-20250101", "system": SYSTEM}
    base.update(kw)
    return HarnessParams(**base)


def collect(harness: Any) -> tuple[Any, list[Event]]:
    events: list[Event] = []
    state = harness.run_sync("go", on_event=events.append)
    return state, events


def test_seeded_jitter_in_a_run(make_harness: Any) -> None:
    """The backoff phase draws its jitter from the clock: reproducible with a seed."""
    clock = FakeClock(seed=11)
    script: list[Reply | Fault] = [Fault.rate_limited(), Fault.rate_limited(), reply("ok")]
    state, _ = collect(make_harness(params(), ScriptedProvider(script), clock=clock))
    twin = FakeClock(seed=11)
    expected = [1.0 * twin.jitter(), 2.0 * twin.jitter()]
    assert state.exit_reason == "model_complete"
    assert clock.sleeps == expected
    assert all(s < full for s, full in zip(clock.sleeps, [1.0, 2.0], strict=True))


def test_retry_after_holds_another_run(make_harness: Any, clock: FakeClock) -> None:
    """A 429 with Retry-After in one run makes the next run on the model wait first."""
    gates = RateLimitGates()
    provider = ScriptedProvider([Fault.rate_limited(retry_after=5), reply("b")])
    no_retries = params(recovery=RecoveryPolicy(max_rate_limit_retries=0))
    failed, _ = collect(make_harness(no_retries, provider, gates=gates))
    assert failed.exit_reason == "failed"
    assert clock.sleeps == []
    state, events = collect(make_harness(params(), provider, gates=gates))
    assert state.exit_reason == "model_complete"
    assert clock.sleeps == [5.0]  # waited at the gate: the other run's Retry-After
    assert [(e.delay, e.retry_after) for e in events if isinstance(e, Backoff)] == [(5.0, None)]
    assert len(provider.requests) == 2


def test_open_circuit_falls_back_without_sending(make_harness: Any, clock: FakeClock) -> None:
    """Once the model's circuit is open, a new run falls back at once: nothing is sent."""
    gates = RateLimitGates(failures=2, cooldown=60.0)
    primary = ScriptedProvider([Fault.rate_limited(), Fault.rate_limited()], name="scripted")
    backup = ScriptedProvider([reply("from backup")], name="backup", dialect="openai")
    warm = ScriptedProvider([reply("warm")], name="backup", dialect="openai")
    chain = params(fallbacks=["backup:b-20250101"], recovery=RecoveryPolicy(backoff_jitter=False))
    opened, _ = collect(make_harness(chain, {"scripted": primary, "backup": warm}, gates=gates))
    assert opened.exit_reason == "model_complete"  # 2 failures opened it: fell back at once
    assert len(primary.requests) == 2
    assert clock.sleeps == [1.0]
    state, events = collect(
        make_harness(chain, {"scripted": primary, "backup": backup}, gates=gates)
    )
    assert state.exit_reason == "model_complete"
    assert len(primary.requests) == 2  # the open circuit sent nothing more
    assert [e.reason for e in events if isinstance(e, Fallback)] == ["rate_limited"]
    assert state.history[-1] == Message.assistant("from backup")
    assert state.degraded
    assert state.errors == {"rate_limited": 1}


def test_open_circuit_without_fallback_waits_for_the_probe(
    make_harness: Any, clock: FakeClock
) -> None:
    """With no fallback, a run waits out the cool-down at the gate and sends the probe."""
    gates = RateLimitGates(failures=1, cooldown=30.0)
    provider = ScriptedProvider([Fault.rate_limited(), reply("back")])
    p = params(recovery=RecoveryPolicy(backoff_jitter=False))
    state, events = collect(make_harness(p, provider, gates=gates))
    assert state.exit_reason == "model_complete"
    # its own backoff (1 s), then the rest of the 30 s cool-down at the gate
    assert clock.sleeps == [1.0, 29.0]
    assert [e.delay for e in events if isinstance(e, Backoff)] == [1.0, 29.0]
    assert gates.gate(provider, "m-20250101").state == "closed"
    assert state.total_wait == 30.0


def test_abort_ends_a_wait_at_the_gate() -> None:
    """A run waiting out an open circuit (real time) is aborted at once by the host."""
    import asyncio
    import time

    from innerloop import Harness

    async def main() -> tuple[str | None, float]:
        gates = RateLimitGates(failures=1, cooldown=30.0)
        provider = ScriptedProvider([Fault.rate_limited(), reply("never")])
        quick = RecoveryPolicy(backoff_initial=0.01, backoff_max=0.01)  # at the gate by 0.3 s
        run = Harness(params(recovery=quick), [provider], gates=gates).start("go")
        asyncio.get_running_loop().call_later(0.3, run.abort, "host stop")
        start = time.monotonic()
        state = await run.run()
        return state.exit_reason, time.monotonic() - start

    reason, took = asyncio.run(main())
    assert reason == "aborted"
    assert took >= 0.3
    assert took < 5.0  # not the 30 s cool-down
