"""SDK and HTTP failures -> :class:`ProviderError` categories.

    HTTP 429, rate_limit_error                 -> rate_limited (with retry_after, seconds)
    HTTP 529, overloaded_error                 -> overloaded
    HTTP 5xx, 408, timeouts, dropped, bad JSON -> transient
    "prompt is too long", context_length_exceeded -> context_overflow
    HTTP 401, 403, 404, any other 4xx          -> fatal

Every message and raw body passes through ``scrub_secrets`` so no API key leaves here.
"""

from __future__ import annotations

import email.utils
import json
import time
from collections.abc import Callable, Mapping
from typing import Any

import httpx2

from innerloop._errors import ErrorCategory, ProviderError
from innerloop.recovery._diagnostic import scrub_secrets

__all__ = [
    "error_from_body",
    "error_from_exception",
    "error_from_status",
    "parse_retry_after",
]

_OVERFLOW_MARKERS = (
    "prompt is too long",
    "context_length_exceeded",
    "maximum context length",
    "context window",
)
_TYPE_CATEGORIES = {
    "rate_limit_error": ErrorCategory.RATE_LIMITED,
    "rate_limit_exceeded": ErrorCategory.RATE_LIMITED,
    "overloaded_error": ErrorCategory.OVERLOADED,
    "api_error": ErrorCategory.TRANSIENT,
    "timeout_error": ErrorCategory.TRANSIENT,
    "server_error": ErrorCategory.TRANSIENT,
}


def parse_retry_after(
    headers: Mapping[str, str], now: Callable[[], float] = time.time
) -> float | None:
    """Seconds to wait, from ``retry-after-ms``, ``retry-after`` in seconds, or
    ``retry-after`` as an HTTP date; ``None`` when absent or unreadable."""
    lowered = {k.lower(): v for k, v in headers.items()}
    ms = lowered.get("retry-after-ms")
    if ms is not None:
        try:
            return max(float(ms) / 1000.0, 0.0)
        except ValueError:
            pass
    value = lowered.get("retry-after")
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - now(), 0.0)


def _error_fields(body: Any) -> tuple[str, str, str]:
    """(type, code, message) of an Anthropic or OpenAI error body."""
    if isinstance(body, Mapping):
        error = body.get("error", body)
        if isinstance(error, Mapping):
            return (
                str(error.get("type") or ""),
                str(error.get("code") or ""),
                str(error.get("message") or ""),
            )
        if isinstance(error, str):
            return "", "", error
    return "", "", ""


def _category(status: int | None, kind: str, code: str, message: str) -> ErrorCategory:
    lowered = f"{kind} {code} {message}".lower()
    if any(marker in lowered for marker in _OVERFLOW_MARKERS):
        return ErrorCategory.CONTEXT_OVERFLOW
    if status == 429:
        return ErrorCategory.RATE_LIMITED
    if status == 529:
        return ErrorCategory.OVERLOADED
    if kind in _TYPE_CATEGORIES:
        return _TYPE_CATEGORIES[kind]
    if status is None or status >= 500 or status == 408:
        return ErrorCategory.TRANSIENT
    return ErrorCategory.FATAL


def error_from_body(
    provider: str,
    body: Any,
    *,
    status: int | None = None,
    headers: Mapping[str, str] | None = None,
    raw: str | None = None,
) -> ProviderError:
    """The error a response body (parsed JSON, or ``None``) and its status stand for."""
    kind, code, message = _error_fields(body)
    category = _category(status, kind, code, message)
    if not message:
        message = f"{kind or 'error'} without a message" if kind else "request failed"
    if kind and kind not in message:
        message = f"{kind}: {message}"
    retry_after = parse_retry_after(headers) if headers is not None else None
    if raw is None and body is not None:
        raw = json.dumps(body)
    return ProviderError(
        category,
        scrub_secrets(message),
        provider=provider,
        status=status,
        retry_after=retry_after,
        raw=scrub_secrets(raw) if raw else None,
    )


def error_from_status(
    provider: str, status: int, headers: Mapping[str, str], text: str
) -> ProviderError:
    """The error an HTTP status, its headers and its body text stand for."""
    try:
        body: Any = json.loads(text) if text.strip() else None
    except ValueError:
        body = None
    if body is None:
        body = {"error": {"message": text.strip()[:500] or f"HTTP {status} with an empty body"}}
    return error_from_body(provider, body, status=status, headers=headers, raw=text)


def error_from_exception(provider: str, exc: BaseException, during: str = "") -> ProviderError:
    """Map an SDK or transport exception. Status errors keep status, headers and body;
    connection failures and timeouts are transient; anything else is fatal. ``during``
    prefixes the message (e.g. ``"mid-stream"``)."""
    if isinstance(exc, ProviderError):
        return exc
    response = getattr(exc, "response", None)
    status = getattr(exc, "status_code", None)
    if isinstance(status, int) and response is not None:
        body = getattr(exc, "body", None)
        headers = dict(response.headers)
        try:
            text = response.text
        except Exception:  # a streamed body that was never read
            text = json.dumps(body) if body is not None else ""
        if body is None or isinstance(body, str):
            return error_from_status(provider, status, headers, text)
        return error_from_body(provider, body, status=status, headers=headers, raw=text)
    name = type(exc).__name__
    transient = (
        "Timeout" in name
        or "Connection" in name
        or "Protocol" in name
        or "Read" in name
        or "Network" in name
        or isinstance(exc, ConnectionError | TimeoutError | httpx2.TransportError)
    )
    category = ErrorCategory.TRANSIENT if transient else ErrorCategory.FATAL
    where = f"{during}: " if during else ""
    return ProviderError(category, scrub_secrets(f"{where}{name}: {exc}"), provider=provider)
