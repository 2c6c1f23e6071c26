"""Credentials stay out of text: error messages, reprs, and the SDKs' and httpx's logs."""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from innerloop._errors import ProviderError
from innerloop._secrets import (
    LOGGERS,
    LogScrubber,
    hide_userinfo,
    scrub_logs,
    scrub_secrets,
)
from innerloop.providers import AnthropicProvider, AsyncioTransport, OpenAIProvider, WireRequest
from innerloop.testing import AnthropicServer, OpenAIServer, Raw, reply

KEY = "sk-ant-test-0123456789abcdefSECRET"
PLAIN_KEY = "plainkey-0123456789"  # a key of no recognisable shape


class TestScrubSecrets:
    @pytest.mark.parametrize(
        ("text", "scrubbed"),
        [
            (f"invalid x-api-key {KEY}", "invalid x-api-key [redacted]"),
            ("sk-proj-0123456789abcdefghij", "[redacted]"),
            ("Authorization: Bearer abcdefghijklmnop", "Authorization: Bearer [redacted]"),
            ("authorization: Basic dXNlcjpwYXNz", "authorization: Basic [redacted]"),
            ("{'X-Api-Key': 'plainkey12345'}", "{'X-Api-Key': '[redacted]'}"),
            ('"api-key": "0123456789abcdef"', '"api-key": "[redacted]"'),
            ("POST http://user:pass@127.0.0.1:4/v1 ok", "POST http://[redacted]@127.0.0.1:4/v1 ok"),
            ("https://token@host/x", "https://[redacted]@host/x"),
            ("see https://example.com/a@b", "see https://example.com/a@b"),  # @ in the path
            ("write to user@example.com", "write to user@example.com"),  # not a URL
            ("basic instructions here", "basic instructions here"),
            ("sk-short", "sk-short"),
        ],
    )
    def test_keys_tokens_and_userinfo_are_removed(self, text: str, scrubbed: str) -> None:
        """What looks like a credential goes; ordinary text stays."""
        assert scrub_secrets(text) == scrubbed

    def test_known_strings_go_whatever_their_shape(self) -> None:
        assert scrub_secrets(f"key={PLAIN_KEY}!", [PLAIN_KEY]) == "key=[redacted]!"

    def test_hide_userinfo(self) -> None:
        assert hide_userinfo("http://u:p@127.0.0.1:9/v1/") == "http://[redacted]@127.0.0.1:9/v1/"
        assert hide_userinfo("http://127.0.0.1:9/v1/") == "http://127.0.0.1:9/v1/"

    def test_the_module_is_a_leaf(self) -> None:
        """innerloop._secrets imports nothing from innerloop, so every layer can use it."""
        import ast

        import innerloop._secrets as module

        tree = ast.parse(Path(module.__file__).read_text())
        imported = [
            name
            for node in ast.walk(tree)
            for name in (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
        ]
        assert imported
        assert not [n for n in imported if n.startswith("innerloop")]

    def test_the_old_import_place_still_works(self) -> None:
        """recovery._diagnostic re-imports the one implementation."""
        from innerloop.lowlevel import scrub_secrets as old

        assert old is scrub_secrets


def _scrubbers() -> set[int]:
    """The distinct scrubbers on the covered loggers (by id), once the providers other
    tests dropped without closing are collected."""
    gc.collect()
    return {
        id(f)
        for name in LOGGERS
        for f in logging.getLogger(name).filters
        if isinstance(f, LogScrubber)
    }


@pytest.fixture
def no_other_users() -> Iterator[None]:
    """Sets aside the scrubber of providers that live beyond their tests (a durable app
    defined at module level, as its workers load it, holds one for the process), so a
    test starts with none on the loggers; puts it back afterwards."""
    gc.collect()
    held = {
        name: [f for f in logging.getLogger(name).filters if isinstance(f, LogScrubber)]
        for name in logging.root.manager.loggerDict
        if name.split(".")[0] in LOGGERS
    }
    for name, scrubbers in held.items():
        for scrubber in scrubbers:
            logging.getLogger(name).removeFilter(scrubber)
    yield
    for name, scrubbers in held.items():
        for scrubber in scrubbers:
            logging.getLogger(name).addFilter(scrubber)


@pytest.mark.usefixtures("no_other_users")
class TestLogScrubbing:
    @pytest.mark.parametrize("route", ["sdk", "wire"])
    @pytest.mark.parametrize(
        ("server_cls", "provider_cls"),
        [(AnthropicServer, AnthropicProvider), (OpenAIServer, OpenAIProvider)],
    )
    def test_no_debug_record_holds_the_key_or_the_password(
        self,
        server_cls: type,
        provider_cls: type,
        route: str,
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        """Through a whole request at DEBUG, with userinfo in the base URL and a server that
        echoes the key in a header, no record holds the key or the password."""
        caplog.set_level(logging.DEBUG)
        echo = (("content-type", "text/event-stream"), ("x-echo", f"x-api-key: {KEY}"))
        server = server_cls()
        body = b"".join(server.frames(reply("hi"), "m"))
        server.push(Raw(200, echo, body), Raw(401, echo, f'{{"error": "bad {KEY}"}}'.encode()))

        async def go() -> None:
            with server:
                base_url = server.base_url.replace("http://", "http://user:pass@")
                transport = AsyncioTransport() if route == "wire" else None
                provider = provider_cls(KEY, base_url=base_url, transport=transport)
                payload = {"model": "m", "max_tokens": 5, "messages": [], "stream": True}
                request = WireRequest(provider.dialect, "m", payload)
                try:
                    assert (await provider.complete(request)).message.text == "hi"
                    with pytest.raises(ProviderError) as caught:
                        await provider.complete(request)
                    assert KEY not in str(caught.value)
                    logging.getLogger("httpx2").debug("the provider is %r", provider)
                finally:
                    await provider.aclose()

        asyncio.run(go())
        records = [r for r in caplog.records if r.name.startswith(("anthropic", "openai", "http"))]
        for record in records:
            text = record.getMessage() + (record.exc_text or "")
            assert KEY not in text, (record.name, text)
            assert "pass" not in text, (record.name, text)
        messages = [r.getMessage() for r in records]
        assert any("http://[redacted]@127.0.0.1" in m for m in messages)  # the repr
        if route == "sdk":  # the SDK logs the URL it sends to, and the response headers
            assert len(records) > 10
            assert any("x-api-key: [redacted]" in m for m in messages)

    def test_the_scrubber_stays_while_a_provider_uses_it(self) -> None:
        """One scrubber for all the loggers, counted by providers: the last aclose takes it
        off; a key of no known shape is hidden while its provider lives."""
        assert _scrubbers() == set()
        logger = logging.getLogger("anthropic._base_client")
        seen: list[str] = []

        class Keep(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                seen.append(record.getMessage())

        handler = Keep()
        logger.addHandler(handler)
        level = logger.level
        logger.setLevel(logging.DEBUG)
        try:
            one = AnthropicProvider(PLAIN_KEY, base_url="http://127.0.0.1:9")
            two = OpenAIProvider(KEY, base_url="http://127.0.0.1:9")
            assert len(_scrubbers()) == 1
            logger.debug("sending %s", PLAIN_KEY)
            asyncio.run(one.aclose())
            assert len(_scrubbers()) == 1  # two still uses it
            logger.debug("sending %s and %s", PLAIN_KEY, KEY)
            asyncio.run(one.aclose())  # a second aclose releases nothing more
            assert len(_scrubbers()) == 1
            asyncio.run(two.aclose())
            assert _scrubbers() == set()
            logger.debug("unscrubbed %s", "sk-ant-test-after-the-last-provider")
        finally:
            logger.removeHandler(handler)
            logger.setLevel(level)
        assert seen == [
            "sending [redacted]",
            f"sending {PLAIN_KEY} and [redacted]",  # one's key is no longer registered
            "unscrubbed sk-ant-test-after-the-last-provider",
        ]

    def test_a_provider_never_closed_releases_the_scrubber_when_collected(self) -> None:
        assert _scrubbers() == set()
        provider = AnthropicProvider(KEY, base_url="http://127.0.0.1:9")
        assert len(_scrubbers()) == 1
        client = provider.client
        del provider
        gc.collect()
        assert _scrubbers() == set()
        asyncio.run(client.close())

    def test_scrub_logs_handles_count_and_release_once(self) -> None:
        assert _scrubbers() == set()
        first, second = scrub_logs([PLAIN_KEY]), scrub_logs([PLAIN_KEY, "short"])
        (scrubber,) = [f for f in logging.getLogger("httpx2").filters if isinstance(f, LogScrubber)]
        assert (scrubber.users, scrubber.known) == (2, {PLAIN_KEY: 2})  # short keys left out
        first.release()
        first.release()
        assert (scrubber.users, scrubber.known) == (1, {PLAIN_KEY: 1})
        second.release()
        assert (scrubber.users, scrubber.known) == (0, {})
        assert _scrubbers() == set()


class TestReprs:
    @pytest.mark.parametrize("cls", [AnthropicProvider, OpenAIProvider])
    def test_no_repr_shows_userinfo(self, cls: type) -> None:
        """The provider's and its wire route's reprs hide the base URL's userinfo."""

        async def go() -> tuple[str, str]:
            provider = cls(
                KEY, base_url="http://user:pass@127.0.0.1:9/v1", transport=AsyncioTransport()
            )
            try:
                return repr(provider), repr(provider.route)
            finally:
                await provider.aclose()

        for text in asyncio.run(go()):
            assert "pass" not in text
            assert KEY not in text
            assert "http://[redacted]@127.0.0.1:9/v1" in text
