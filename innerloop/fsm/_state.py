"""HarnessState: everything that evolves while the loop runs."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import attrs

from innerloop._errors import ProviderError
from innerloop._messages import Message, ModelResponse, Usage

__all__ = ["AbortFlag", "HarnessState", "Task"]


class AbortFlag:
    """A thread-safe abort request. ``request()`` may be called from any thread or task;
    the driver registers a waker so that whatever the run is waiting on is cancelled."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self.reason: str = ""
        self._wakers: list[Callable[[], None]] = []

    def request(self, reason: str = "abort requested by the host") -> None:
        with self._lock:
            if self._event.is_set():
                return
            self.reason = reason
            self._event.set()
            wakers = list(self._wakers)
        for wake in wakers:
            wake()

    @property
    def requested(self) -> bool:
        return self._event.is_set()

    def add_waker(self, wake: Callable[[], None]) -> None:
        with self._lock:
            self._wakers.append(wake)
            fire = self._event.is_set()
        if fire:
            wake()

    def remove_waker(self, wake: Callable[[], None]) -> None:
        with self._lock:
            if wake in self._wakers:
                self._wakers.remove(wake)

    def __repr__(self) -> str:
        return f"AbortFlag(requested={self.requested}, reason={self.reason!r})"


@attrs.define
class Task:
    """A pending task: seeded by the host or kept by the model through the task tool."""

    id: str
    text: str
    done: bool = False


@attrs.define(eq=False)
class HarnessState:
    """Mutable state of one run. Phase handlers write it; guards only read it."""

    history: list[Message] = attrs.Factory(list)
    tasks: list[Task] = attrs.Factory(list)
    usage: Usage = Usage()
    turns: int = 0
    """Model responses received so far."""
    active: int = 0
    """Index of the active model in ``params.model_chain``."""
    degraded: bool = False
    """True once the run has fallen back from its primary model."""
    abort: AbortFlag = attrs.Factory(AbortFlag)
    outcome: str = ""
    """What the last phase did (``opened``, ``failed``, ``response``, ``compacted``...)."""
    exit_reason: str | None = None
    final_state: str | None = None

    # counters
    errors: dict[str, int] = attrs.Factory(dict)
    """Failures so far per error category (for the whole run)."""
    tool_failures: dict[str, int] = attrs.Factory(dict)
    """Consecutive failures per tool name; a success resets it."""
    rate_limit_failures: int = 0
    """Consecutive rate-limit/overload failures on the active model."""
    transient_failures: int = 0
    """Consecutive transient failures (5xx, malformed, empty, dropped)."""
    backoff_attempts: int = 0
    total_wait: float = 0.0
    cost_usd: float | None = 0.0
    resolved_models: list[str] = attrs.Factory(list)

    # the current turn
    context_tokens: int = 0
    error: ProviderError | None = None
    """The failure of the last call or stream, if it failed."""
    request: Any = None
    """The normalized wire request of the current turn."""
    stream: Any = None
    """The open model stream between ``call`` and ``stream``."""
    last_response: ModelResponse | None = None
    compaction_reason: str | None = None
    diagnostic: dict[str, Any] | None = None
    notes: dict[str, Any] = attrs.Factory(dict)
    """Free space for custom states and hosts."""

    def count_error(self, category: str) -> None:
        self.errors[category] = self.errors.get(category, 0) + 1

    @property
    def pending_tool_uses(self) -> tuple[str, ...]:
        """Ids of tool calls in the last assistant message that have no result yet."""
        if not self.history:
            return ()
        last = self.history[-1]
        if last.role != "assistant":
            return ()
        return tuple(b.id for b in last.tool_uses)
