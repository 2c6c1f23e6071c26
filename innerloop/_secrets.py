"""Keeping credentials out of text: messages, raw bodies, reprs and third parties' logs.

A leaf module (it imports nothing from innerloop), so every layer can use it.

- :data:`SECRET_PATTERNS` is the one set of secret shapes (provider keys, AWS, GitHub,
  GitLab, Google, Slack, Stripe, npm, Hugging Face and SendGrid tokens, private key blocks,
  JWTs, bearer tokens, the value of an ``x-api-key``, ``api-key`` or ``authorization``
  header); :func:`replace_secrets` replaces each with a marker of the caller's.
- :func:`scrub_secrets` replaces each of them and the userinfo of URLs
  (``http://user:pass@host`` -> ``http://[redacted]@host``) with ``[redacted]``, plus any
  exact strings it is given (a key of no known shape).
- :func:`hide_userinfo` is the URL part alone, for reprs.
- :func:`scrub_logs` puts a :class:`LogScrubber` on the loggers of the SDKs and the HTTP
  stack while a provider uses them; the scrubber rewrites each record they emit. The
  scrubber lives on the loggers themselves and counts its users: the last one to leave
  takes it off again.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any, Final

__all__ = [
    "LOGGERS",
    "REDACTED",
    "SECRET_PATTERNS",
    "LogScrubber",
    "ScrubHandle",
    "hide_userinfo",
    "replace_secrets",
    "scrub_fields",
    "scrub_logs",
    "scrub_secrets",
]

REDACTED: Final = "[redacted]"

SECRET_PATTERNS: Final[Mapping[str, str]] = MappingProxyType(
    {
        # provider API keys
        "anthropic_key": r"sk-ant-[A-Za-z0-9_\-]{8,}",
        "openai_key": r"sk-[A-Za-z0-9_\-]{16,}",
        # AWS key ids: AKIA (long-term), ASIA (temporary), ABIA (STS bearer), ACCA
        # (context-specific), then 16 upper-case letters and digits; a secret access key
        # (40 base64 characters) only where its name labels it
        "aws_access_key": r"(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b",
        "aws_secret_key": r"(?i:aws_?secret_?(?:access_?)?key)\\?['\"]?\s*[:=]\s*\\?['\"]?"
        r"(?P<secret>[A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])",
        # GitHub: ghp_ (personal), gho_ (OAuth), ghu_ / ghs_ (app user / server), ghr_
        # (refresh), then 36 or more base62 characters; fine-grained github_pat_ tokens
        "github_token": r"(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})\b",
        "gitlab_token": r"glpat-[A-Za-z0-9_\-]{20,}",
        # Google API keys: AIza and 35 URL-safe characters
        "google_api_key": r"AIza[0-9A-Za-z_\-]{35}",
        # Slack tokens (xoxb- bot, xoxp- user, xoxa-/xoxr- app and refresh, xoxs-) and
        # incoming-webhook URLs
        "slack_token": r"xox[abprs]-[0-9A-Za-z\-]{10,}",
        "slack_webhook": r"https://hooks\.slack\.com/(?:services|workflows)/[A-Za-z0-9_/+\-]{20,}",
        # Stripe secret and restricted keys, live or test (publishable pk_ keys are public)
        "stripe_key": r"[rs]k_(?:live|test)_[0-9A-Za-z]{16,}",
        "npm_token": r"npm_[A-Za-z0-9]{36}\b",
        "huggingface_token": r"hf_[A-Za-z]{34}\b",
        "sendgrid_key": r"SG\.[A-Za-z0-9_\-]{22}\.[A-Za-z0-9_\-]{43}",
        # a PEM private key block (RSA, EC, OPENSSH, ENCRYPTED, PGP ...), to its end line
        # or, cut short, to the end of the text or of the JSON string holding it (a body
        # that takes escapes in pairs and stops at a quote, so JSON text stays JSON)
        "private_key": r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----(?:[^\"\\]|\\.)*?"
        r"(?:-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|(?=\")|\Z)",
        # a JSON Web Token: base64url header and payload (both JSON: "eyJ"), signature
        "jwt": r"eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*",
        # a bearer token after the word, and the value of an api-key or authorization
        # header ("x-api-key: v", "'authorization': 'Basic v'", "api-key=v")
        "bearer_token": r"(?i:bearer)\s+(?P<secret>[A-Za-z0-9._~+/=\-]{12,})",
        "auth_header": r"(?i:api-key|authorization)\\?['\"]?\s*[:=]\s*\\?['\"]?"
        r"(?:(?i:basic|bearer|token)\s+)?(?P<secret>[^\s'\",}\[\\]{8,})",
    }
)
"""The one maintained set of secret shapes, kind -> regular expression, tried in this order
(``sk-ant-`` before ``sk-``). Where a pattern has a ``secret`` group only that part is
replaced (the header's name stays). Every sink uses it: logs, spans, the live view,
diagnostics, provider errors, and the guardrail example."""


_WORD_START: Final = frozenset(
    {
        "aws_access_key",
        "github_token",
        "gitlab_token",
        "google_api_key",
        "slack_token",
        "stripe_key",
        "npm_token",
        "huggingface_token",
        "sendgrid_key",
        "jwt",
    }
)
"""Kinds whose match must not start inside a word (``xAKIA...`` is no key id), though it
may right after an escaped newline or tab (JSON text, as spans and event logs hold it:
``"a\\nAKIA..."``). Checked on each match, so the patterns begin with their literal
prefix, which keeps the search fast."""


def _starts_word(text: str, at: int) -> bool:
    if at == 0 or (not text[at - 1].isalnum() and text[at - 1] != "_"):
        return True
    return at >= 2 and text[at - 2] == "\\" and text[at - 1] in "nrt"


_TRIGGERS: Final[Mapping[str, tuple[str, ...]]] = MappingProxyType(
    {
        "anthropic_key": ("sk-ant-",),
        "openai_key": ("sk-",),
        "aws_access_key": ("akia", "asia", "abia", "acca"),
        "aws_secret_key": ("secret",),
        "github_token": ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
        "gitlab_token": ("glpat-",),
        "google_api_key": ("aiza",),
        "slack_token": ("xox",),
        "slack_webhook": ("hooks.slack.com",),
        "stripe_key": ("k_live_", "k_test_"),
        "npm_token": ("npm_",),
        "huggingface_token": ("hf_",),
        "sendgrid_key": ("sg.",),
        "private_key": ("private key",),
        "jwt": ("eyj",),
        "bearer_token": ("bearer",),
        "auth_header": ("api-key", "authorization"),
    }
)
"""For each kind, lower-case strings one of which every match holds: text holding none
of them is returned at once, without running the patterns."""
_ANY_TRIGGER: Final = tuple(t for triggers in _TRIGGERS.values() for t in triggers)


@functools.cache
def _compiled() -> tuple[tuple[str, re.Pattern[str], tuple[str, ...]], ...]:
    """Each kind's pattern, compiled the first time a text holds a trigger (not at
    import: most texts hold none)."""
    return tuple(
        (kind, re.compile(pattern), _TRIGGERS[kind]) for kind, pattern in SECRET_PATTERNS.items()
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


def replace_secrets(text: str, marker: Callable[[str], str]) -> tuple[str, list[str]]:
    """``text`` with each secret of :data:`SECRET_PATTERNS` replaced by ``marker(kind)``,
    and the kinds found (kind by kind, in the set's order). Each pattern runs only when
    the text holds one of its literal prefixes, so text without any costs one scan."""
    found: list[str] = []
    lowered = text.lower()
    if not any(trigger in lowered for trigger in _ANY_TRIGGER):
        return text, found
    for kind, pattern, triggers in _compiled():
        if not any(trigger in lowered for trigger in triggers):
            continue
        text = pattern.sub(_replacer(kind, marker(kind), found), text)
    return text, found


def _replacer(kind: str, mark: str, found: list[str]) -> Callable[[re.Match[str]], str]:
    """The replacement of one kind's matches: ``mark`` in place of the ``secret`` group
    (or the whole match), each recorded in ``found``."""

    def replace(match: re.Match[str]) -> str:
        whole = match.group(0)
        if kind in _WORD_START and not _starts_word(match.string, match.start()):
            return whole
        found.append(kind)
        if "secret" not in match.re.groupindex:
            return mark
        start, end = match.start("secret") - match.start(), match.end("secret") - match.start()
        return whole[:start] + mark + whole[end:]

    return replace


def _redacted(kind: str) -> str:
    return REDACTED


def scrub_secrets(text: str, known: Iterable[str] = ()) -> str:
    """``text`` without anything that looks like an API key, a token or URL userinfo (see
    :data:`SECRET_PATTERNS`), and without any of the ``known`` strings (secrets of no
    recognisable shape). JSON text stays JSON: no pattern takes a quote or half of an
    escape, and a token right after an escaped newline (``\\nAKIA...``) is found."""
    for secret in known:
        if secret and secret in text:
            text = text.replace(secret, REDACTED)
    if "@" in text:
        text = _USERINFO.sub(rf"\1{REDACTED}@", text)
    return replace_secrets(text, _redacted)[0]


def scrub_fields(fields: Mapping[str, Any]) -> dict[str, Any]:
    """``fields`` with each string value scrubbed (see :func:`scrub_secrets`)."""
    return {k: scrub_secrets(v) if isinstance(v, str) else v for k, v in fields.items()}


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
