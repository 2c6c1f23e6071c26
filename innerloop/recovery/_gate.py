"""A process-wide rate-limit gate per provider endpoint and model, with a circuit breaker.

Without it, a thousand runs hitting a 429 storm each pay their own retries: six requests a
run. With it, every run on the model shares what one learned:

- a 429 or 529 with a Retry-After holds new calls of every run on that model until then
  (for ``max_hold`` seconds at most);
- after ``failures`` consecutive rate-limit failures (across runs) the model's circuit
  opens for ``cooldown`` seconds: runs with a fallback model left switch to it at once,
  the others wait at the gate instead of sending;
- after the cool-down one call goes as the half-open probe while the others wait for its
  answer: a success closes the circuit, a failure opens it again for twice the cool-down
  (at most ``max_cooldown``).

The gate reads time from the clock of the run that asks, so runs sharing a gate share a
clock (real time, in production).

An endpoint may also take only so many calls at once: ``RateLimitGates(max_concurrent=1)``
(or ``{base_url: 1}`` for some endpoints only) gives each endpoint :class:`EndpointSlots`,
shared by its models' gates, that a call holds from before it is sent until its stream is
closed; the others wait their turn, first come first served. A llama.cpp server with one
slot cuts a running stream when another request arrives: with a limit of 1 none is cut.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import math
import threading
import weakref
from collections.abc import Mapping
from typing import Any, Final, Literal

import attrs

from innerloop._errors import ParamsError

__all__ = ["Admission", "RateLimitGate", "RateLimitGates", "shared_gates"]

GateState = Literal["closed", "open", "half_open"]


@attrs.frozen
class Admission:
    """The gate's answer to a run about to call the model."""

    wait: float = 0.0
    """Seconds to wait before asking again (0: send now)."""
    circuit_open: bool = False
    """The circuit is open (or its probe is out): a run with a fallback should switch now."""
    probe: bool = False
    """This call is the half-open probe: its outcome decides the circuit."""


_GO: Final = Admission()


def _positive(name: str, value: float) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not (value > 0 and math.isfinite(value))
    ):
        raise ParamsError(name, f"must be a finite number > 0, got {value!r}", value)


class EndpointSlots:
    """At most ``limit`` calls in flight on one endpoint, across runs, threads and event
    loops; waiters are served in order. ``acquire`` before sending, ``release`` once the
    call's stream is closed (or it failed)."""

    def __init__(self, limit: int) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ParamsError(
                "gates.max_concurrent",
                f"must be an int >= 1 (calls in flight on one endpoint), got {limit!r}",
                limit,
            )
        self.limit = limit
        self.busy = 0
        """Calls holding a slot now."""
        self.waited = 0
        """Calls that had to wait for a slot."""
        self._lock = threading.Lock()
        self._waiters: collections.deque[
            tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]
        ] = collections.deque()

    async def acquire(self) -> None:
        """Take a slot, waiting for one when all are busy (cancellation leaves none held)."""
        with self._lock:
            if self.busy < self.limit:
                self.busy += 1
                return
            loop = asyncio.get_running_loop()
            future: asyncio.Future[None] = loop.create_future()
            self._waiters.append((loop, future))
            self.waited += 1
        try:
            await future
        except asyncio.CancelledError:
            with self._lock:
                queued = (loop, future) in self._waiters
                if queued:
                    self._waiters.remove((loop, future))
            if not queued and future.done() and not future.cancelled():
                self.release()  # handed a slot while being cancelled: pass it on
            raise

    def release(self) -> None:
        """Give a slot back: to the first waiter, else free."""
        with self._lock:
            if self._waiters:
                loop, future = self._waiters.popleft()
                loop.call_soon_threadsafe(self._hand_over, future)
                return
            self.busy -= 1

    def _hand_over(self, future: asyncio.Future[None]) -> None:
        if future.cancelled():  # its waiter left meanwhile: the slot goes on
            self.release()
        else:
            future.set_result(None)

    def __repr__(self) -> str:
        return f"<EndpointSlots {self.busy}/{self.limit} busy waiting={len(self._waiters)}>"


class RateLimitGate:
    """The shared state of one provider endpoint and model; thread-safe. ``slots`` (None
    without a concurrency limit) are the endpoint's, shared with its other models."""

    def __init__(
        self,
        *,
        failures: int = 10,
        cooldown: float = 5.0,
        max_cooldown: float = 60.0,
        probe_timeout: float = 60.0,
        max_hold: float = 300.0,
        slots: EndpointSlots | None = None,
    ) -> None:
        self.slots = slots
        if isinstance(failures, bool) or not isinstance(failures, int) or failures < 1:
            raise ParamsError(
                "gate.failures",
                f"must be an int >= 1 (consecutive failures that open the circuit), got "
                f"{failures!r}",
                failures,
            )
        _positive("gate.cooldown", cooldown)
        _positive("gate.max_cooldown", max_cooldown)
        _positive("gate.probe_timeout", probe_timeout)
        _positive("gate.max_hold", max_hold)
        self.failures = failures
        self.cooldown = float(cooldown)
        self.max_cooldown = float(max(max_cooldown, cooldown))
        self.probe_timeout = float(probe_timeout)
        self.max_hold = float(max_hold)
        """The longest a Retry-After may hold the gate, in seconds."""
        self._lock = threading.Lock()
        self.consecutive = 0
        """Consecutive rate-limit failures on this model, across runs."""
        self.hold_until = float("-inf")
        self.open_until: float | None = None
        self._next_cooldown = self.cooldown
        self._probe_deadline: float | None = None
        self.opened = 0
        """How many times the circuit opened."""
        self.probes = 0
        """How many half-open probes were let through."""

    @property
    def state(self) -> GateState:
        if self.open_until is None:
            return "closed"
        return "half_open" if self._probe_deadline is not None else "open"

    def admit(self, now: float) -> Admission:
        """May a call go now? Call it right before sending."""
        if self.open_until is None and now >= self.hold_until:
            # closed and not held (the common case): nothing to change, so no lock; a
            # failure recorded meanwhile by another thread counts as coming after this
            return _GO
        with self._lock:
            if self.open_until is not None:
                if now < self.open_until:
                    return Admission(self.open_until - now, circuit_open=True)
                if self._probe_deadline is not None and now < self._probe_deadline:
                    # the probe is out: ask again after a tenth of a cool-down
                    wait = min(self._probe_deadline - now, self.cooldown / 10)
                    return Admission(wait, circuit_open=True)
                self._probe_deadline = now + self.probe_timeout
                self.probes += 1
                return Admission(probe=True)
            if now < self.hold_until:
                return Admission(self.hold_until - now)
            return _GO

    def success(self) -> None:
        """A call was accepted: the model serves again."""
        if (
            self.consecutive == 0
            and self.open_until is None
            and self._probe_deadline is None
            and self._next_cooldown == self.cooldown
        ):
            return  # nothing to reset (the common case): no lock
        with self._lock:
            self.consecutive = 0
            self.open_until = None
            self._probe_deadline = None
            self._next_cooldown = self.cooldown

    def failure(self, now: float, retry_after: float | None) -> None:
        """A call was rate limited or overloaded (``retry_after``: the server's wait, which
        holds the gate for at most ``max_hold`` seconds; one that is not finite is ignored)."""
        with self._lock:
            self.consecutive += 1
            if retry_after is not None and math.isfinite(retry_after) and retry_after >= 0:
                self.hold_until = max(self.hold_until, now + min(retry_after, self.max_hold))
            probe_failed = self._probe_deadline is not None
            if probe_failed or (self.open_until is None and self.consecutive >= self.failures):
                cooldown = self._next_cooldown
                self._next_cooldown = min(cooldown * 2, self.max_cooldown)
                self.open_until = max(now + cooldown, self.hold_until)
                self._probe_deadline = None
                self.opened += 1

    def release(self) -> None:
        """A call ended neither way (another error): a probe it was may be retried."""
        with self._lock:
            self._probe_deadline = None

    def __repr__(self) -> str:
        return (
            f"<RateLimitGate {self.state} consecutive={self.consecutive} "
            f"opened={self.opened} probes={self.probes}>"
        )


def _endpoint(provider: Any) -> str | None:
    """The base URL of an SDK-backed provider's client; None for other providers."""
    base = getattr(getattr(provider, "client", None), "base_url", None)
    return None if base is None else str(base)


def _url_key(url: str) -> str:
    return url.rstrip("/")


class RateLimitGates:
    """The gates of a process, one per provider endpoint and model.

    Providers with an SDK client are keyed by name and base URL, so runs with separate
    provider objects for the same API share a gate; other providers by the object itself.
    The settings apply to every gate made here.

    ``max_concurrent`` limits the calls in flight on an endpoint (see
    :class:`EndpointSlots`): an int for every endpoint, or a mapping from base URL (as the
    provider's client has it, e.g. ``"http://127.0.0.1:8080/v1/"``; a trailing slash is
    not needed) to the limit of that endpoint; None (the default) for no limit."""

    def __init__(
        self,
        *,
        failures: int = 10,
        cooldown: float = 5.0,
        max_cooldown: float = 60.0,
        probe_timeout: float = 60.0,
        max_hold: float = 300.0,
        max_concurrent: int | Mapping[str, int] | None = None,
    ) -> None:
        self._make = functools.partial(
            RateLimitGate,
            failures=failures,
            cooldown=cooldown,
            max_cooldown=max_cooldown,
            probe_timeout=probe_timeout,
            max_hold=max_hold,
        )
        self._make()  # the settings are checked here, once
        self._limits: dict[str, int] | int | None
        if isinstance(max_concurrent, Mapping):
            self._limits = {_url_key(u): n for u, n in max_concurrent.items()}
            for n in self._limits.values():
                EndpointSlots(n)  # checked here
        else:
            self._limits = max_concurrent
            if max_concurrent is not None:
                EndpointSlots(max_concurrent)
        self._slots: dict[Any, EndpointSlots] = {}
        self._object_slots: weakref.WeakKeyDictionary[Any, EndpointSlots] = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.Lock()
        self._by_url: dict[tuple[str, str, str], RateLimitGate] = {}
        self._by_object: weakref.WeakKeyDictionary[Any, dict[str, RateLimitGate]] = (
            weakref.WeakKeyDictionary()
        )

    def _endpoint_slots(self, provider: Any, url: str | None) -> EndpointSlots | None:
        """The slots of ``provider``'s endpoint (by URL, else the object); None unlimited."""
        limits = self._limits
        if limits is None:
            return None
        if isinstance(limits, int):
            limit: int | None = limits
        else:
            limit = limits.get(_url_key(url)) if url is not None else None
        if limit is None:
            return None
        if url is None:
            found = self._object_slots.get(provider)
            if found is None:
                found = self._object_slots[provider] = EndpointSlots(limit)
            return found
        key = _url_key(url)
        found = self._slots.get(key)
        if found is None:
            found = self._slots[key] = EndpointSlots(limit)
        return found

    def gate(self, provider: Any, model: str) -> RateLimitGate:
        """The gate of ``provider``'s ``model`` (made on first use)."""
        url = _endpoint(provider)
        with self._lock:
            if url is not None:
                key = (str(getattr(provider, "name", "")), url, model)
                found = self._by_url.get(key)
                if found is None:
                    slots = self._endpoint_slots(provider, url)
                    found = self._by_url[key] = self._make(slots=slots)
                return found
            models = self._by_object.setdefault(provider, {})
            found = models.get(model)
            if found is None:
                slots = self._endpoint_slots(provider, None)
                found = models[model] = self._make(slots=slots)
            return found

    def __repr__(self) -> str:
        count = len(self._by_url) + sum(len(m) for m in self._by_object.values())
        return f"<RateLimitGates gates={count}>"


_SHARED = RateLimitGates()


def shared_gates() -> RateLimitGates:
    """The process-wide gates every harness uses unless given its own."""
    return _SHARED
