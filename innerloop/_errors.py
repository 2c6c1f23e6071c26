"""The exception tree of innerloop.

    InnerloopError
    ├── ParamsError (ValueError)      bad HarnessParams, raised at construction
    ├── SpecError (ValueError)        a machine spec that cannot run, raised at compile
    ├── ToolDefinitionError (ValueError)  a tool that cannot be defined
    ├── ContentError (ValueError)     a content block that is malformed, or that the
    │                                 provider of the request cannot take
    ├── ConversionError (ValueError)  data that cannot be written as, or read from, JSON
    ├── ResumeError (ValueError)      a resume that cannot go on: the run is not suspended,
    │                                 the answer has the wrong shape
    ├── SessionError (RuntimeError)   a conversation cannot take the next message yet
    │   └── SessionLimitError         a conversation-wide limit is spent
    └── ProviderError                 a model call failed; ``category`` drives recovery

Only ``ParamsError``, ``SpecError``, ``ToolDefinitionError`` and ``ContentError``
(programmer errors) ever leave a run: every runtime failure is routed by the machine and
ends in a final state.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

__all__ = [
    "ContentError",
    "ConversionError",
    "ErrorCategory",
    "InnerloopError",
    "ParamsError",
    "ProviderError",
    "ResumeError",
    "SessionError",
    "SessionLimitError",
    "SpecError",
    "ToolDefinitionError",
]


class InnerloopError(Exception):
    """Root of every error innerloop raises."""


class ParamsError(InnerloopError, ValueError):
    """HarnessParams (or a part of it) holds a bad value or an incompatible combination."""

    def __init__(self, field: str, reason: str, value: Any = None) -> None:
        self.field = field
        self.reason = reason
        self.value = value
        super().__init__(f"{field}: {reason}")


class SpecError(InnerloopError, ValueError):
    """A machine spec breaks a rule checked at compile time."""

    def __init__(self, rule: str, message: str, states: tuple[str, ...] = ()) -> None:
        self.rule = rule
        self.states = states
        super().__init__(message)


class ToolDefinitionError(InnerloopError, ValueError):
    """A tool cannot be defined (bad annotation, duplicate name, ...)."""


class ContentError(InnerloopError, ValueError):
    """A content block is malformed (raised when it is made), or the provider a request goes
    to cannot take it (raised when the request is built, before anything is sent)."""

    def __init__(self, block: str, reason: str, dialect: str | None = None) -> None:
        self.block = block
        """The block's type (``document``, ``image``)."""
        self.reason = reason
        self.dialect = dialect
        """The wire format that cannot take the block; None for a malformed block."""
        where = f" (for {dialect})" if dialect else ""
        super().__init__(f"{block} block{where}: {reason}")


class ConversionError(InnerloopError, ValueError):
    """A value has no JSON form, or JSON data does not read as the type asked for.

    ``type_name`` is the type being converted, ``reason`` says what is wrong and how to fix
    it, ``value`` is the offending value (or data).
    """

    def __init__(self, type_name: str, reason: str, value: Any = None) -> None:
        self.type_name = type_name
        self.reason = reason
        self.value = value
        super().__init__(reason)


class ResumeError(InnerloopError, ValueError):
    """A run cannot be resumed as asked: it is not suspended (or is, and no answer was
    given), or the answer does not fit its interrupt. Nothing was changed or written."""

    def __init__(self, run: str | None, reason: str, answer: Any = None) -> None:
        self.run = run
        self.reason = reason
        self.answer = answer
        super().__init__(f"run {run!r}: {reason}" if run is not None else reason)


class SessionError(InnerloopError, RuntimeError):
    """A conversation cannot take a new message now: its last message's run waits for an
    answer (suspended), or has not reached a final state. Nothing was written."""

    def __init__(self, conversation: str, reason: str) -> None:
        self.conversation = conversation
        self.reason = reason
        super().__init__(f"conversation {conversation!r}: {reason}")


class SessionLimitError(SessionError):
    """A conversation-wide limit (``max_turns_total``, ``spend_budget_total``) is spent:
    no further message runs. ``limit`` names it. Nothing was written."""

    def __init__(self, conversation: str, limit: str, reason: str) -> None:
        self.limit = limit
        super().__init__(conversation, reason)


class ErrorCategory(enum.StrEnum):
    """The closed set of failure kinds that recovery guards read."""

    RATE_LIMITED = "rate_limited"
    OVERLOADED = "overloaded"
    TRANSIENT = "transient"
    CONTEXT_OVERFLOW = "context_overflow"
    FATAL = "fatal"


class ProviderError(InnerloopError):
    """A model call failed. ``category`` decides the recovery branch.

    ``retry_after`` is in seconds (already converted from an HTTP date or from
    ``retry-after-ms``), always finite; ``retry_after_header`` is that header as the
    server sent it (``"retry-after: 1e400"``), kept so a refused wait can be quoted.
    ``raw`` is the response body as received, with any API key removed. The message never
    contains an API key.
    """

    def __init__(
        self,
        category: ErrorCategory,
        message: str,
        *,
        provider: str = "",
        status: int | None = None,
        retry_after: float | None = None,
        raw: str | None = None,
        retry_after_header: str | None = None,
    ) -> None:
        self.category = ErrorCategory(category)
        self.message = message
        self.provider = provider
        self.status = status
        self.retry_after = retry_after
        self.raw = raw
        self.retry_after_header = retry_after_header
        where = f"{provider} " if provider else ""
        code = f"HTTP {status} " if status is not None else ""
        super().__init__(f"{where}{code}{self.category.value}: {message}")

    @property
    def retryable(self) -> bool:
        """True when the machine may retry the same call."""
        return self.category is not ErrorCategory.FATAL

    def reworded(self, message: str, *, keep_wait: bool = True) -> ProviderError:
        """The same error saying ``message`` (category, provider, status, body and the
        Retry-After header as sent kept); without ``keep_wait`` it asks for no wait."""
        return ProviderError(
            self.category,
            message,
            provider=self.provider,
            status=self.status,
            retry_after=self.retry_after if keep_wait else None,
            raw=self.raw,
            retry_after_header=self.retry_after_header,
        )

    @classmethod
    def wrap(cls, exc: Exception, provider: str) -> ProviderError:
        """``exc`` itself when it is a ProviderError; else a fatal one describing it (an
        unexpected exception from a provider is a bug there, not something to retry)."""
        if isinstance(exc, ProviderError):
            return exc
        return cls(
            ErrorCategory.FATAL,
            f"unexpected {type(exc).__name__} from the provider: {exc}",
            provider=provider,
        )

    def fields(self) -> dict[str, Any]:
        """Every field as JSON data, ``raw`` included: the lossless form (the one the
        event log and the durable engines carry)."""
        return {
            "category": self.category.value,
            "message": self.message,
            "provider": self.provider,
            "status": self.status,
            "retry_after": self.retry_after,
            "retry_after_header": self.retry_after_header,
            "raw": self.raw,
        }

    @classmethod
    def from_fields(cls, data: Mapping[str, Any]) -> ProviderError:
        """The inverse of :meth:`fields`."""
        return cls(
            ErrorCategory(data["category"]),
            data["message"],
            provider=data.get("provider") or "",
            status=data.get("status"),
            retry_after=data.get("retry_after"),
            raw=data.get("raw"),
            retry_after_header=data.get("retry_after_header"),
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON form without ``raw`` (a diagnostic carries the body scrubbed, apart)."""
        return {k: v for k, v in self.fields().items() if k != "raw"}
