"""Python logging: the ``innerloop`` logger and one child per package.

Silent by default: ``innerloop`` carries a :class:`logging.NullHandler`, so nothing is
printed until the host configures logging (``logging.basicConfig(level=logging.INFO)``).

===========================  =========  ===================================================
logger                       level      what
===========================  =========  ===================================================
``innerloop.fsm``            DEBUG      every transition (source, target, guard)
``innerloop.fsm``            INFO       the run finished (exit reason, turns, tokens, cost)
``innerloop.fsm``            WARNING    abort requested by the host or a tool
``innerloop.fsm``            ERROR      abort on a failure (with the error's category)
``innerloop.providers``      INFO       a rate-limited or overloaded model call
``innerloop.providers``      WARNING    any other failed model call
``innerloop.recovery``       INFO       backoff, compaction
``innerloop.recovery``       WARNING    fallback to the next model, alerts
``innerloop.tools``          DEBUG      a tool call that succeeded
``innerloop.tools``          WARNING    a tool call that failed or timed out
===========================  =========  ===================================================

Each record carries structured fields in ``extra``: ``event`` (the event's type, as in
the event log) and the event's figures under names that never clash with
:class:`logging.LogRecord`'s own (``tool_name``, not ``name``). Every text is passed through
:func:`~innerloop._secrets.scrub_secrets` first: no key or token reaches a log.

The driver asks :func:`event_logger` once per run which event types are enabled, so a
disabled level costs one dictionary look-up per event.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from innerloop._errors import ErrorCategory, ProviderError
from innerloop._events import (
    Abort,
    Alert,
    Backoff,
    Compacted,
    Event,
    Fallback,
    Finished,
    ToolExecuted,
    Transition,
)
from innerloop._secrets import scrub_fields, scrub_secrets

__all__ = ["LOG", "EventLogger", "event_logger", "log_model_failure", "logger"]

LOG = logging.getLogger("innerloop")
"""The root of the package's loggers; a ``NullHandler`` keeps it silent by default."""
if not any(isinstance(h, logging.NullHandler) for h in LOG.handlers):
    LOG.addHandler(logging.NullHandler())

FSM = logging.getLogger("innerloop.fsm")
PROVIDERS = logging.getLogger("innerloop.providers")
RECOVERY = logging.getLogger("innerloop.recovery")
TOOLS = logging.getLogger("innerloop.tools")


def logger(package: str) -> logging.Logger:
    """The child logger of one package: ``logger("fsm")`` is ``innerloop.fsm``."""
    return logging.getLogger(f"innerloop.{package}")


Record = tuple[int, str, dict[str, Any]]
"""Level, message and ``extra`` of one record."""


def _transition(ev: Transition) -> Record:
    via = f" [{ev.guard}]" if ev.guard else ""
    return (
        logging.DEBUG,
        f"transition {ev.source} -> {ev.target}{via}",
        {"source": ev.source, "target": ev.target, "guard": ev.guard},
    )


def _backoff(ev: Backoff) -> Record:
    after = f", Retry-After {ev.retry_after:g} s" if ev.retry_after is not None else ""
    return (
        logging.INFO,
        f"backoff attempt {ev.attempt}: waiting {ev.delay:g} s{after} (total {ev.total_wait:g} s)",
        {
            "attempt": ev.attempt,
            "delay": ev.delay,
            "retry_after": ev.retry_after,
            "total_wait": ev.total_wait,
        },
    )


def _fallback(ev: Fallback) -> Record:
    return (
        logging.WARNING,
        f"fallback from {ev.from_provider}:{ev.from_model} to {ev.to_provider}:{ev.to_model} "
        f"({ev.reason})",
        {
            "from_provider": ev.from_provider,
            "from_model": ev.from_model,
            "to_provider": ev.to_provider,
            "to_model": ev.to_model,
            "reason": ev.reason,
        },
    )


def _compacted(ev: Compacted) -> Record:
    return (
        logging.INFO,
        f"compacted ({ev.reason}): {ev.tokens_before} -> {ev.tokens_after} tokens, "
        f"{ev.removed_messages} messages removed",
        {
            "reason": ev.reason,
            "tokens_before": ev.tokens_before,
            "tokens_after": ev.tokens_after,
            "removed_messages": ev.removed_messages,
        },
    )


def _alert(ev: Alert) -> Record:
    return (
        logging.WARNING,
        f"alert {ev.kind}: {ev.message}",
        {"kind": ev.kind, "alert": ev.message},
    )


def _abort(ev: Abort) -> Record:
    diagnostic = ev.diagnostic or {}
    error = diagnostic.get("error")
    category = error.get("category") if isinstance(error, Mapping) else None
    level = logging.ERROR if ev.diagnostic is not None else logging.WARNING
    return (
        level,
        f"abort: {ev.reason}",
        {"reason": ev.reason, "category": category},
    )


def _tool(ev: ToolExecuted) -> Record:
    if not (ev.timed_out or ev.is_error or TOOLS.isEnabledFor(logging.DEBUG)):
        return logging.DEBUG, "", {}  # not logged: no text made (a call of every turn)
    fields = {
        "tool_name": ev.name,
        "tool_use_id": ev.tool_use_id,
        "is_error": ev.is_error,
        "timed_out": ev.timed_out,
        "duration": ev.duration,
    }
    if ev.timed_out:
        return logging.WARNING, f"tool {ev.name} timed out after {ev.duration:.3f} s", fields
    if ev.is_error:
        first = ev.output.splitlines()[0][:200] if ev.output else ""
        return logging.WARNING, f"tool {ev.name} failed: {first}", fields
    return logging.DEBUG, f"tool {ev.name} ran in {ev.duration:.3f} s", fields


def _finished(ev: Finished) -> Record:
    cost = f", ${ev.cost_usd:.6f}" if ev.cost_usd is not None else ""
    return (
        logging.INFO,
        f"run finished: {ev.exit_reason} in {ev.final_state} after {ev.turns} turns, "
        f"{ev.usage.input_tokens} input / {ev.usage.output_tokens} output tokens{cost}",
        {
            "exit_reason": ev.exit_reason,
            "final_state": ev.final_state,
            "turns": ev.turns,
            "input_tokens": ev.usage.input_tokens,
            "output_tokens": ev.usage.output_tokens,
            "cost_usd": ev.cost_usd,
        },
    )


_RULES: dict[type[Event], tuple[logging.Logger, int, Callable[[Any], Record]]] = {
    Transition: (FSM, logging.DEBUG, _transition),
    Backoff: (RECOVERY, logging.INFO, _backoff),
    Fallback: (RECOVERY, logging.WARNING, _fallback),
    Compacted: (RECOVERY, logging.INFO, _compacted),
    Alert: (RECOVERY, logging.WARNING, _alert),
    Abort: (FSM, logging.ERROR, _abort),
    ToolExecuted: (TOOLS, logging.WARNING, _tool),
    Finished: (FSM, logging.INFO, _finished),
}
"""Event type -> (logger, highest level it may log at, record builder)."""


class EventLogger:
    """Logs a run's events; built by :func:`event_logger` with the types enabled now."""

    __slots__ = ("rules",)

    def __init__(
        self, rules: Mapping[type[Event], tuple[logging.Logger, Callable[[Any], Record]]]
    ) -> None:
        self.rules = dict(rules)

    def __call__(self, event: Event) -> None:
        rule = self.rules.get(type(event))
        if rule is None:
            return
        log, build = rule
        level, message, fields = build(event)
        if log.isEnabledFor(level):
            fields["event"] = event.type
            log.log(level, scrub_secrets(message), extra=scrub_fields(fields))

    def __bool__(self) -> bool:
        return bool(self.rules)

    def __repr__(self) -> str:
        return f"<EventLogger {sorted(t.type for t in self.rules)}>"


def event_logger() -> EventLogger:
    """A logger of the event types whose loggers would log at least their highest level
    now (each record is still checked against its own level)."""
    return EventLogger(
        {t: (log, build) for t, (log, level, build) in _RULES.items() if log.isEnabledFor(level)}
    )


def log_model_failure(error: ProviderError) -> None:
    """A failed model call: INFO when rate-limited or overloaded, else WARNING."""
    quiet = error.category in (ErrorCategory.RATE_LIMITED, ErrorCategory.OVERLOADED)
    level = logging.INFO if quiet else logging.WARNING
    if PROVIDERS.isEnabledFor(level):
        PROVIDERS.log(
            level,
            scrub_secrets(f"model call failed ({error.category.value}): {error}"),
            extra={
                "event": "model_error",
                "category": error.category.value,
                "provider": error.provider,
                "status": error.status,
                "retry_after": error.retry_after,
            },
        )
