"""Keeping credentials out of text: messages, raw bodies, reprs and third parties' logs.

A leaf module (it imports nothing from innerloop), so every layer can use it.

- :func:`scrub_secrets` replaces anything shaped like an API key or a token (``sk-ant-…``,
  ``sk-…``, ``Bearer …``, the value of an ``x-api-key``, ``api-key`` or ``authorization``
  header) and the userinfo of URLs (``http://user:pass@host`` -> ``http://[redacted]@host``),
  plus any exact strings it is given (a key of no known shape).
- :func:`hide_userinfo` is the URL part alone, for reprs.
- :func:`scrub_logs` puts a :class:`LogScrubber` on the loggers of the SDKs and the HTTP
  stack while a provider uses them; the scrubber rewrites each record they emit. The
  scrubber lives on the loggers themselves and counts its users: the last one to leave
  takes it off again.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from typing import Final

__all__ = [
    "LOGGERS",
    "REDACTED",
    "LogScrubber",
    "ScrubHandle",
    "hide_userinfo",
    "scrub_logs",
    "scrub_secrets",
]

REDACTED: Final = "[redacted]"

_SECRET = re.compile(
    r"sk-ant-[A-Za-z0-9_\-]{8,}"
    r"|sk-[A-Za-z0-9_\-]{16,}"
    r"|(?i:bearer)\s+[A-Za-z0-9._~+/=\-]{12,}"
    # a header's value, as "x-api-key: v", "'authorization': 'Basic v'", "api-key=v"
    r"|(?i:(?<=api-key)|(?<=authorization))"
    r"(['\"]?\s*[:=]\s*['\"]?(?:(?i:basic|bearer|token)\s+)?)[^\s'\",}]{8,}"
)
# scheme://userinfo@ : what sits between "//" and the first "@" before any "/", "?" or "#"
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^/?#@\s'\"]*@")

LOGGERS: Final = (
    "anthropic",
    "anthropic._base_client",
    "anthropic._response",
    "openai",
    "openai._base_client",
    "openai._response",
    "openai._legacy_response",
    "httpx2",
    "httpcore2",
    "httpcore2.connection",
    "httpcore2.http11",
    "httpcore2.http2",
    "httpcore2.proxy",
    "httpcore2.socks",
)
"""The loggers :func:`scrub_logs` covers, with any of their descendants that exist when it
is called (a filter on a logger sees only the records that logger itself makes)."""


def _secret(match: re.Match[str]) -> str:
    separator = match.group(1)
    return REDACTED if separator is None else separator + REDACTED


def scrub_secrets(text: str, known: Iterable[str] = ()) -> str:
    """``text`` without anything that looks like an API key, a token or URL userinfo, and
    without any of the ``known`` strings (secrets of no recognisable shape)."""
    for secret in known:
        if secret and secret in text:
            text = text.replace(secret, REDACTED)
    if "@" in text:
        text = _USERINFO.sub(rf"\1{REDACTED}@", text)
    return _SECRET.sub(_secret, text)


def hide_userinfo(url: str) -> str:
    """``url`` with its userinfo (``user:password@``) replaced, for reprs and messages."""
    return _USERINFO.sub(rf"\1{REDACTED}@", url) if "@" in url else url


class LogScrubber(logging.Filter):
    """Rewrites each record so its message holds no secret (see :func:`scrub_secrets`).

    One scrubber is shared by all the covered loggers; ``users`` counts the unreleased
    :func:`scrub_logs` handles, ``known`` the exact secrets they registered (each with a
    count of the handles that registered it)."""

    def __init__(self) -> None:
        super().__init__("innerloop.secrets")
        self.users = 0
        self.known: dict[str, int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken format string: keep the template, drop the args
            message = str(record.msg)
        scrubbed = scrub_secrets(message, self.known)
        if scrubbed != message or record.args:
            record.msg, record.args = scrubbed, None
        if record.exc_info and not record.exc_text:
            formatted = logging.Formatter().formatException(record.exc_info)
            record.exc_text = scrub_secrets(formatted, self.known)
        return True

    def __repr__(self) -> str:
        return f"<LogScrubber users={self.users} secrets={len(self.known)}>"


def _covered() -> list[logging.Logger]:
    prefixes = tuple(f"{name}." for name in LOGGERS)
    names = {*LOGGERS, *(n for n in logging.root.manager.loggerDict if n.startswith(prefixes))}
    return [logging.getLogger(name) for name in sorted(names)]


def _installed() -> LogScrubber | None:
    for f in logging.getLogger(LOGGERS[0]).filters:
        if isinstance(f, LogScrubber):
            return f
    return None


class ScrubHandle:
    """One user's hold on the log scrubber: :meth:`release` (idempotent) gives it back."""

    __slots__ = ("_known", "_released", "_scrubber")

    def __init__(self, scrubber: LogScrubber, known: tuple[str, ...]) -> None:
        self._scrubber = scrubber
        self._known = known
        self._released = False

    def release(self) -> None:
        """Forget this user's secrets; the last user takes the scrubber off the loggers."""
        if self._released:
            return
        self._released = True
        scrubber = self._scrubber
        for secret in self._known:
            left = scrubber.known.get(secret, 0) - 1
            if left > 0:
                scrubber.known[secret] = left
            else:
                scrubber.known.pop(secret, None)
        scrubber.users -= 1
        if scrubber.users <= 0:
            for logger in _covered():
                logger.removeFilter(scrubber)

    def __repr__(self) -> str:
        return f"<ScrubHandle {'released' if self._released else 'held'}>"


def scrub_logs(known: Iterable[str] = ()) -> ScrubHandle:
    """Scrub the records of the SDKs' and the HTTP stack's loggers (:data:`LOGGERS`, and
    their descendants that exist by now) until the returned handle is released; ``known``
    adds exact secrets (an API key) to hide; those shorter than 8 characters are left out,
    as replacing them would garble ordinary words."""
    scrubber = _installed() or LogScrubber()
    for logger in _covered():
        if scrubber not in logger.filters:
            logger.addFilter(scrubber)
    scrubber.users += 1
    secrets = tuple(s for s in known if len(s) >= 8)
    for secret in secrets:
        scrubber.known[secret] = scrubber.known.get(secret, 0) + 1
    return ScrubHandle(scrubber, secrets)
