"""SDK and HTTP failures -> :class:`ProviderError` categories.

    HTTP 429, rate_limit_error                 -> rate_limited (with retry_after, seconds)
    HTTP 529, overloaded_error                 -> overloaded
    HTTP 5xx, 408, timeouts, dropped, bad JSON -> transient
    "prompt is too long", context_length_exceeded -> context_overflow
    HTTP 422, or a 4xx/5xx whose body says the request's shape is invalid
      ("Input should be ...", "validation error", "Field required") -> fatal: the same
      request meets it again (a compatible server's 500 for a field it cannot take)
    HTTP 401, 403, 404, any other 4xx          -> fatal
    no status (an error event inside a 200 stream): by the error's type, else its code
      (insufficient_quota, invalid_request_error, ... -> fatal: account and request
      errors; rate_limit_exceeded -> rate_limited; server_error -> transient), else transient

Amazon Bedrock names its errors in ``x-amzn-ErrorType`` (an HTTP error) or in an
event-stream exception message (mid-stream): ``throttlingException`` -> rate_limited;
``internalServerException``, ``modelStreamErrorException``, ``modelTimeoutException``,
``serviceUnavailableException`` -> transient; "Input is too long" -> context_overflow.

An exception without an HTTP status is looked up in :data:`EXCEPTION_TABLE` by type: the
first class of its MRO that has a row decides, so the most specific row wins and a
subclass takes its nearest ancestor's row (as httpx maps httpcore's exceptions). The SDKs'
rows are resolved only once the SDK is imported (no exception of theirs exists before).

Every message and raw body passes through ``scrub_secrets`` so no API key leaves here.
"""

from __future__ import annotations

import email.utils
import json
import math
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

import httpx2

from innerloop._errors import ErrorCategory, ProviderError
from innerloop._secrets import scrub_secrets

__all__ = [
    "EXCEPTION_TABLE",
    "category_of",
    "connection_detail",
    "error_from_body",
    "error_from_exception",
    "error_from_status",
    "parse_retry_after",
    "retry_after_header",
]

_OVERFLOW_MARKERS = (
    "prompt is too long",
    "context_length_exceeded",
    "maximum context length",
    "context window",
    "input is too long",  # Bedrock's ValidationException
)
_SHAPE_MARKERS = (
    "input should be",  # pydantic 2's messages (llama.cpp's and vLLM's servers)
    "validation error",
    "field required",
    "extra inputs are not permitted",
)
"""Words of a body that refuses the request's shape: never retried unchanged."""
_TYPE_CATEGORIES = {
    "rate_limit_error": ErrorCategory.RATE_LIMITED,
    "rate_limit_exceeded": ErrorCategory.RATE_LIMITED,
    "overloaded_error": ErrorCategory.OVERLOADED,
    "api_error": ErrorCategory.TRANSIENT,
    "timeout_error": ErrorCategory.TRANSIENT,
    "server_error": ErrorCategory.TRANSIENT,
    # Amazon Bedrock's exception types, looked up in lower case
    "throttlingexception": ErrorCategory.RATE_LIMITED,
    "internalserverexception": ErrorCategory.TRANSIENT,
    "modelstreamerrorexception": ErrorCategory.TRANSIENT,
    "modeltimeoutexception": ErrorCategory.TRANSIENT,
    "serviceunavailableexception": ErrorCategory.TRANSIENT,
    "vector_store_timeout": ErrorCategory.TRANSIENT,
    # account and request errors: the same request meets them again
    "insufficient_quota": ErrorCategory.FATAL,
    "invalid_request_error": ErrorCategory.FATAL,
    "invalid_api_key": ErrorCategory.FATAL,
    "invalid_prompt": ErrorCategory.FATAL,
    "authentication_error": ErrorCategory.FATAL,
    "permission_error": ErrorCategory.FATAL,
    "billing_error": ErrorCategory.FATAL,
    "billing_hard_limit_reached": ErrorCategory.FATAL,
    "not_found_error": ErrorCategory.FATAL,
    "model_not_found": ErrorCategory.FATAL,
    "request_too_large": ErrorCategory.FATAL,
}
"""Error types and codes (looked up in lower case) -> category, after the status of a
429 or 529 and before the others: the type first, then the code."""


_T, _F = ErrorCategory.TRANSIENT, ErrorCategory.FATAL

EXCEPTION_TABLE: tuple[tuple[str, str, ErrorCategory], ...] = (
    # (module, class name, category); the row of the nearest class in the MRO wins
    ("builtins", "Exception", _F),  # unknown: a bug somewhere, never retried
    # the network and the stream itself (asyncio, sockets, TLS, decoders)
    ("builtins", "OSError", _T),  # resets, unreachable networks, ...
    ("builtins", "ConnectionError", _T),
    ("builtins", "TimeoutError", _T),  # asyncio.TimeoutError too
    ("builtins", "EOFError", _T),  # the peer went away
    ("builtins", "FileNotFoundError", _F),  # a missing CA bundle or socket path
    ("builtins", "PermissionError", _F),
    ("builtins", "UnicodeDecodeError", _T),  # malformed body
    ("json", "JSONDecodeError", _T),  # malformed body
    ("zlib", "error", _T),  # malformed (corrupt gzip or deflate) body
    ("asyncio", "IncompleteReadError", _T),  # dropped mid-body
    ("asyncio", "LimitOverrunError", _T),  # malformed: a line past the reader's limit
    ("ssl", "SSLError", _T),  # a TLS record cut short
    ("ssl", "SSLCertVerificationError", _F),  # a retry meets the same certificate
    # httpx2 (the SDKs' HTTP stack, and what AsyncioTransport raises)
    ("httpx2", "HTTPError", _F),
    ("httpx2", "TransportError", _T),
    ("httpx2", "TimeoutException", _T),  # connect, read, write and pool timeouts
    ("httpx2", "NetworkError", _T),  # connect, read, write and close errors
    ("httpx2", "ProtocolError", _T),
    ("httpx2", "RemoteProtocolError", _T),  # bad framing, dropped connection
    ("httpx2", "LocalProtocolError", _F),  # a request we built wrong
    ("httpx2", "ProxyError", _T),
    ("httpx2", "UnsupportedProtocol", _F),  # a base URL that is not http(s)
    ("httpx2", "DecodingError", _T),  # malformed (corrupt gzip) body
    ("httpx2", "TooManyRedirects", _F),
    ("httpx2", "InvalidURL", _F),
    ("httpx2", "StreamError", _F),  # a body read twice or after close: a bug
    # the SDKs (a status error is mapped by its status before this table)
    ("anthropic", "AnthropicError", _F),
    ("anthropic", "APIConnectionError", _T),
    ("anthropic", "APITimeoutError", _T),
    ("anthropic", "APIResponseValidationError", _T),  # malformed response
    ("anthropic", "CredentialsError", _F),
    ("openai", "OpenAIError", _F),
    ("openai", "APIConnectionError", _T),
    ("openai", "APITimeoutError", _T),
    ("openai", "APIResponseValidationError", _T),  # malformed response
)
"""Exception types without an HTTP status -> category. Each row names a class by module
and name, resolved when that module has been imported."""


def _table() -> dict[type, ErrorCategory]:
    table: dict[type, ErrorCategory] = {}
    for module_name, name, category in EXCEPTION_TABLE:
        module = sys.modules.get(module_name)
        cls = getattr(module, name, None) if module is not None else None
        if isinstance(cls, type):
            table[cls] = category
    return table


def category_of(exc: BaseException) -> ErrorCategory:
    """The category of an exception that carries no HTTP status: the row of the first
    class of its MRO in :data:`EXCEPTION_TABLE` (fatal when none has one)."""
    table = _table()
    for cls in type(exc).__mro__:
        category = table.get(cls)
        if category is not None:
            return category
    return ErrorCategory.FATAL


def _finite_seconds(text: str, scale: float = 1.0) -> float | None:
    """``text`` as a number of seconds >= 0; None when it is no number or not a finite
    one (``inf``, ``nan``, ``1e400``): such a wait is refused, never waited on."""
    try:
        seconds = float(text) * scale
    except ValueError:
        return None
    return max(seconds, 0.0) if math.isfinite(seconds) else None


def retry_after_header(headers: Mapping[str, str]) -> str | None:
    """The header that sets the wait, as sent (``"retry-after-ms: 1e308"``), to quote."""
    lowered = {k.lower(): v for k, v in headers.items()}
    for name in ("retry-after-ms", "retry-after"):
        if name in lowered:
            return f"{name}: {lowered[name]}"
    return None


def parse_retry_after(
    headers: Mapping[str, str], now: Callable[[], float] = time.time
) -> float | None:
    """Seconds to wait, from ``retry-after-ms``, ``retry-after`` in seconds, or
    ``retry-after`` as an HTTP date; ``None`` when absent, unreadable or not finite
    (``inf``, ``nan``, ``1e400``: a wait no run should take). The result is finite."""
    lowered = {k.lower(): v for k, v in headers.items()}
    ms = lowered.get("retry-after-ms")
    if ms is not None:
        try:
            float(ms)
        except ValueError:
            pass  # unreadable: the seconds header may still say
        else:
            return _finite_seconds(ms, 0.001)
    value = lowered.get("retry-after")
    if value is None:
        return None
    try:
        float(value)
    except ValueError:
        pass
    else:
        return _finite_seconds(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return max(when.timestamp() - now(), 0.0)


def _error_fields(body: Any) -> tuple[str, str, str]:
    """(type, code, message) of an Anthropic or OpenAI error body (or a FastAPI one:
    ``{"detail": ...}``, as compatible servers answer a request they cannot read)."""
    if isinstance(body, Mapping):
        if "error" not in body and "detail" in body:
            return "", "", str(body["detail"])
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


def _amazon_error_type(headers: Mapping[str, str]) -> str:
    """The type Amazon names in ``x-amzn-ErrorType`` (``ThrottlingException:http://...``)."""
    for key, value in headers.items():
        if key.lower() == "x-amzn-errortype":
            return value.partition(":")[0].strip()
    return ""


def _category(status: int | None, kind: str, code: str, message: str) -> ErrorCategory:
    lowered = f"{kind} {code} {message}".lower()
    if any(marker in lowered for marker in _OVERFLOW_MARKERS):
        return ErrorCategory.CONTEXT_OVERFLOW
    if status == 429:
        return ErrorCategory.RATE_LIMITED
    if status == 529:
        return ErrorCategory.OVERLOADED
    if status is not None and (status == 422 or any(m in lowered for m in _SHAPE_MARKERS)):
        return ErrorCategory.FATAL  # the request's shape: the same request fails again
    by_type = _TYPE_CATEGORIES.get(kind.lower()) or _TYPE_CATEGORIES.get(code.lower())
    if by_type is not None:
        return by_type
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
    if not kind and headers is not None:
        kind = _amazon_error_type(headers)
    category = _category(status, kind, code, message)
    label = kind or code
    if not message:
        message = f"{label} without a message" if label else "request failed"
    if label and label not in message:
        message = f"{label}: {message}"
    retry_after = parse_retry_after(headers) if headers is not None else None
    header = retry_after_header(headers) if headers is not None else None
    if raw is None and body is not None:
        raw = json.dumps(body)
    return ProviderError(
        category,
        scrub_secrets(message),
        provider=provider,
        status=status,
        retry_after=retry_after,
        raw=scrub_secrets(raw) if raw else None,
        retry_after_header=scrub_secrets(header) if header else None,
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


_CAUSES: tuple[tuple[type[BaseException], str], ...] = (
    (ConnectionRefusedError, "refused"),
    (ConnectionResetError, "reset"),
    (ConnectionAbortedError, "reset"),
    (BrokenPipeError, "reset"),
    (TimeoutError, "timed out"),
    (httpx2.TimeoutException, "timed out"),
    (httpx2.RemoteProtocolError, "dropped"),
    (httpx2.ConnectError, "failed"),
)
"""The causes a failed connection is named by, in the order they are looked for along an
exception's chain: the OS's own reason (refused, reset) before the transport's wrapper."""


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and its causes (``__cause__``, else ``__context__``), at most 16."""
    chain: list[BaseException] = []
    node: BaseException | None = exc
    while node is not None and len(chain) < 16 and node not in chain:
        chain.append(node)
        node = node.__cause__ or node.__context__
    return chain


def _request_url(chain: list[BaseException]) -> str | None:
    """The URL of the request an exception of ``chain`` names (SDK and httpx2 errors)."""
    for node in chain:
        try:
            request = getattr(node, "request", None)
        except RuntimeError:  # httpx2: an error raised outside of a request
            continue
        url = getattr(request, "url", None)
        if url is not None:
            return str(url)
    return None


def connection_detail(exc: BaseException, url: str | None = None) -> str | None:
    """``"connection to URL refused"`` (reset, timed out, dropped, failed) for a failure
    to reach the server, or None when ``exc`` is none such. ``url`` stands in when no
    exception of the chain names its request."""
    chain = _chain(exc)
    cause = next(
        (name for kind, name in _CAUSES for node in chain if isinstance(node, kind)), None
    )
    if cause is None:
        return None
    where = _request_url(chain) or url or "the server"
    return f"connection to {where} {cause}"


def error_from_exception(
    provider: str, exc: BaseException, during: str = "", url: str | None = None
) -> ProviderError:
    """Map an SDK or transport exception. Status errors keep status, headers and body;
    the others take their category from :data:`EXCEPTION_TABLE`, and a failure to reach
    the server says where and why (``connection to http://host/v1/... refused``; ``url``
    when the exception does not name it). ``during`` prefixes the message (e.g.
    ``"mid-stream"``)."""
    if isinstance(exc, ProviderError):
        return exc
    response = getattr(exc, "response", None)
    status = getattr(exc, "status_code", None)
    if status is None and isinstance(exc, httpx2.HTTPStatusError):
        status = exc.response.status_code
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
    where = f"{during}: " if during else ""
    detail = connection_detail(exc, url)
    said = f" ({detail})" if detail is not None else ""
    message = scrub_secrets(f"{where}{name}: {exc}{said}")
    return ProviderError(category_of(exc), message, provider=provider)
