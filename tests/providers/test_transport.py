"""AsyncioTransport: HTTP/1.1 framing, the pool, timeouts and TLS over real sockets, the
SDKs' clients on it, and providers writing their requests on it (``WireRoute``)."""

from __future__ import annotations

import asyncio
import gc
import gzip
import http.server
import json
import logging
import re
import shutil
import ssl
import subprocess
import threading
import time
import warnings
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from innerloop import Harness, HarnessParams, ProviderError
from innerloop.providers import (
    AnthropicProvider,
    AsyncioTransport,
    OpenAIProvider,
    WireRequest,
)
from innerloop.providers._transport import parse_head
from innerloop.testing import (
    AnthropicServer,
    OpenAIServer,
    RateLimit,
    SlowReply,
    assert_valid_history,
    reply,
    tool_call,
)
from innerloop.tools import ToolContext, ToolOutput, ToolSpec

KEY = "sk-ant-api03-transport-0123456789abcdef"
Pieces = list[bytes | float]  # bytes to write, or seconds to pause


class RawServer:
    """A loopback server that answers each request with scripted pieces of bytes."""

    def __init__(self, *answers: Pieces, close_after: bool = False) -> None:
        self.answers = list(answers)
        self.close_after = close_after
        self.connections = 0
        self.requests: list[bytes] = []
        self.port = 0
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> RawServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()

    @property
    def url(self) -> httpx2.URL:
        return httpx2.URL(f"http://127.0.0.1:{self.port}/v1/x")

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while self.answers:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                self.requests.append(head + await reader.readexactly(length))
                for piece in self.answers.pop(0):
                    if isinstance(piece, float):
                        await asyncio.sleep(piece)
                    else:
                        writer.write(piece)
                        await writer.drain()
                if self.close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def _headers(url: httpx2.URL, body: bytes = b"") -> list[tuple[bytes, bytes]]:
    return [(b"Host", url.netloc), (b"Content-Length", b"%d" % len(body))]


async def _get(
    transport: AsyncioTransport, url: httpx2.URL, read_limit: float = 5.0
) -> tuple[int, list[bytes]]:
    """One request; ``read_limit`` is the transport's read timeout."""
    limits = httpx2.Timeout(read_limit)
    response = await transport.send("POST", url, _headers(url), b"", limits)
    try:
        return response.status, [chunk async for chunk in response]
    finally:
        await response.aclose()


def run(coro: Awaitable[Any]) -> Any:
    async def main() -> Any:
        return await coro

    return asyncio.run(main())


OK_CHUNKED = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"


class TestFraming:
    def test_chunked_body_split_at_every_awkward_place(self) -> None:
        """Size lines, CRLFs and data split across writes; extensions and trailers."""

        async def go() -> None:
            pieces: Pieces = [
                OK_CHUNKED + b"5",
                0.01,
                b";ext=1\r\nhel",
                0.01,
                b"lo\r",
                0.01,
                b"\n6\r\n world\r\n0\r\nx-trailer: 1\r",
                0.01,
                b"\n\r\n",
            ]
            async with RawServer(pieces) as server:
                transport = AsyncioTransport()
                status, chunks = await _get(transport, server.url)
                assert status == 200
                assert b"".join(chunks) == b"hello world"
                assert transport.idle_connections == 1  # read to the end: reusable

        run(go())

    @settings(max_examples=40, deadline=None)
    @given(
        st.lists(st.binary(min_size=1, max_size=24), min_size=1, max_size=8),
        st.lists(st.integers(min_value=1, max_value=12), max_size=12),
    )
    def test_any_chunks_split_anywhere_come_out_whole(
        self, chunks: list[bytes], cuts: list[int]
    ) -> None:
        """Random chunk data (CRLFs inside too), the wire bytes cut at random places and
        written as separate packets: the body is the chunks' data, byte for byte."""
        wire = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"
        pieces: Pieces = [OK_CHUNKED]
        pos = 0
        for cut in cuts:
            if pos < len(wire):
                pieces += [0.001, wire[pos : pos + cut]]
                pos += cut
        pieces += [0.001, wire[pos:]]

        async def go() -> None:
            async with RawServer(pieces) as server:
                transport = AsyncioTransport()
                _, got = await _get(transport, server.url)
                assert transport.idle_connections == 1
            assert b"".join(got) == b"".join(chunks)

        run(go())

    def test_chunks_that_arrive_together_come_out_as_one_piece(self) -> None:
        async def go() -> None:
            body = b"3\r\nabc\r\n3\r\ndef\r\n0\r\n\r\n"
            async with RawServer([OK_CHUNKED + body]) as server:
                _, chunks = await _get(AsyncioTransport(), server.url)
            assert chunks == [b"abcdef"]

        run(go())

    def test_one_whole_chunk_per_read_even_with_crlf_inside(self) -> None:
        async def go() -> None:
            pieces: Pieces = [OK_CHUNKED, 0.01, b"5\r\na\r\nbc\r\n", 0.01]
            pieces += [b"1\r\nd\r\n", 0.01, b"0\r\n\r\n"]
            async with RawServer(pieces) as server:
                _, chunks = await _get(AsyncioTransport(), server.url)
            assert chunks == [b"a\r\nbc", b"d"]

        run(go())

    def test_content_length_body(self) -> None:
        async def go() -> None:
            head = b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n"
            async with RawServer([head + b"01234", 0.01, b"56789"]) as server:
                _, chunks = await _get(AsyncioTransport(), server.url)
            assert b"".join(chunks) == b"0123456789"

        run(go())

    def test_body_to_close_is_read_whole_and_the_connection_not_kept(self) -> None:
        async def go() -> None:
            head = b"HTTP/1.1 200 OK\r\n\r\n"
            async with RawServer([head + b"all of", 0.01, b" it"], close_after=True) as server:
                transport = AsyncioTransport()
                _, chunks = await _get(transport, server.url)
            assert b"".join(chunks) == b"all of it"
            assert (transport.open_connections, transport.idle_connections) == (0, 0)

        run(go())

    def test_interim_response_is_skipped_and_no_content_has_no_body(self) -> None:
        async def go() -> None:
            answer = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n"
            async with RawServer([answer]) as server:
                transport = AsyncioTransport()
                status, chunks = await _get(transport, server.url)
            assert (status, chunks) == (204, [])
            assert transport.idle_connections == 1

        run(go())

    @pytest.mark.parametrize(
        ("answer", "message"),
        [
            (OK_CHUNKED + b"zz\r\n", "bad chunk size line b'zz'"),
            (OK_CHUNKED + b"3\r\nabcdef\r\n", "a chunk is longer than its size line says"),
            (
                b"HTTP/1.1 200 OK\r\ncontent-length: ten\r\n\r\n",
                "bad content-length b'ten': digits only",
            ),
            (b"SPDY/3 200 OK\r\n\r\n", "bad status line b'SPDY/3 200 OK'"),
            (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "bad header line b'no colon here'"),
            (
                OK_CHUNKED + b"5\r\nab",
                "the server closed the connection in the middle of a response",
            ),
            (b"", "the server closed the connection without sending a response"),
        ],
    )
    def test_broken_responses_raise_protocol_errors_that_name_the_fault(
        self, answer: bytes, message: str
    ) -> None:
        async def go() -> None:
            async with RawServer([answer], close_after=True) as server:
                transport = AsyncioTransport()
                with pytest.raises(httpx2.RemoteProtocolError, match=message.replace("(", r"\(")):
                    await _get(transport, server.url)
            assert transport.open_connections == 0

        run(go())


H11 = b"HTTP/1.1 200 OK"
H10 = b"HTTP/1.0 200 OK"


def _head(status: bytes, *headers: bytes) -> bytes:
    return b"\r\n".join([status, *headers])


class TestParseHead:
    """The framing decision alone, from head bytes: no sockets (RFC 9112 §6, §9.3)."""

    @pytest.mark.parametrize(
        ("head", "framing", "length", "keep"),
        [
            (_head(H11, b"content-length: 10"), "length", 10, True),
            (_head(H11, b"Content-Length: 007"), "length", 7, True),
            (_head(H11, b"content-length: 5, 5"), "length", 5, True),  # the same value twice
            (_head(H11, b"content-length: 5", b"content-length: 5"), "length", 5, True),
            (_head(H11, b"transfer-encoding: chunked"), "chunked", 0, True),
            (_head(H11, b"Transfer-Encoding: Chunked"), "chunked", 0, True),
            (_head(H11), "close", 0, False),  # no length: the body runs to the close
            (_head(H11, b"connection: close", b"content-length: 2"), "length", 2, False),
            (_head(H11, b"connection: upgrade, Close", b"content-length: 2"), "length", 2, False),
            (_head(H11, b"connection: closed", b"content-length: 2"), "length", 2, True),
            (_head(H10, b"content-length: 2"), "length", 2, False),  # 1.0: no reuse by default
            (_head(H10, b"connection: keep-alive", b"content-length: 2"), "length", 2, True),
            (_head(H10, b"Connection: Keep-Alive", b"content-length: 2"), "length", 2, True),
            (_head(H10, b"connection: keep-alive"), "close", 0, False),  # no length
            (_head(b"HTTP/1.1 204 No Content"), "length", 0, True),
            (_head(b"HTTP/1.1 304 Not Modified", b"content-length: 99"), "length", 0, True),
            (_head(b"HTTP/1.1 200"), "close", 0, False),  # no reason phrase
        ],
    )
    def test_framing_and_reuse(self, head: bytes, framing: str, length: int, keep: bool) -> None:
        """Version and connection options decide reuse; the headers decide the framing."""
        parsed = parse_head(head)
        assert (parsed.framing, parsed.length, parsed.keep) == (framing, length, keep)

    @pytest.mark.parametrize(
        ("head", "message"),
        [
            (_head(H11, b"content-length: 1_0"), "bad content-length b'1_0': digits only"),
            (_head(H11, b"content-length: -1"), "bad content-length b'-1': digits only"),
            (_head(H11, b"content-length: +5"), "bad content-length b'+5': digits only"),
            (_head(H11, b"content-length: 0x10"), "bad content-length b'0x10': digits only"),
            (_head(H11, b"content-length: "), "bad content-length b'': digits only"),
            (_head(H11, b"content-length: ten"), "bad content-length b'ten': digits only"),
            (
                _head(H11, b"content-length: 5", b"content-length: 6"),
                "conflicting content-length values (5, 6)",
            ),
            (_head(H11, b"content-length: 5, 6"), "conflicting content-length values (5, 6)"),
            (
                _head(H11, b"content-length: 5", b"transfer-encoding: chunked"),
                "both transfer-encoding and content-length",
            ),
            (
                _head(H11, b"transfer-encoding: chunked, gzip", b"content-length: 20"),
                "both transfer-encoding and content-length",
            ),
            (
                _head(H11, b"transfer-encoding: chunked, gzip"),
                "transfer-encoding 'chunked, gzip' is not supported: only chunked",
            ),
            (
                _head(H11, b"transfer-encoding: gzip, chunked"),
                "transfer-encoding 'gzip, chunked' is not supported: only chunked",
            ),
            (
                _head(H11, b"transfer-encoding: chunked", b"transfer-encoding: chunked"),
                "transfer-encoding 'chunked, chunked' is not supported: only chunked",
            ),
            (
                _head(H10, b"transfer-encoding: chunked"),
                "transfer-encoding in an HTTP/1.0 response",
            ),
            (_head(b"HTTP/2 200 OK"), "bad status line b'HTTP/2 200 OK'"),
            (_head(b"HTTP/1.1 2000 OK"), "bad status line b'HTTP/1.1 2000 OK'"),
            (_head(b"HTTP/1.1 2x0 OK"), "bad status line b'HTTP/1.1 2x0 OK'"),
            (_head(b"http/1.1 200 OK"), "bad status line b'http/1.1 200 OK'"),
            (_head(H11, b"content length: 5"), "bad header line b'content length: 5'"),
            (_head(H11, b" folded: line"), "bad header line b' folded: line'"),
            (_head(H11, b"content-length : 5"), "bad header line b'content-length : 5'"),
        ],
    )
    def test_bad_or_ambiguous_framing_is_an_error(self, head: bytes, message: str) -> None:
        """What could be read two ways is refused, naming the fault."""
        with pytest.raises(httpx2.RemoteProtocolError) as caught:
            parse_head(head)
        assert str(caught.value).startswith(message)

    def test_a_head_request_has_no_body_whatever_the_headers_say(self) -> None:
        """HEAD: content-length describes the body a GET would get."""
        parsed = parse_head(_head(H11, b"content-length: 1234"), head_only=True)
        assert (parsed.framing, parsed.length, parsed.keep) == ("length", 0, True)

    def test_status_reason_and_headers_are_kept_as_sent(self) -> None:
        parsed = parse_head(_head(b"HTTP/1.1 429 Too Many Requests", b"Retry-After:  7 "))
        assert (parsed.status, parsed.reason) == (429, b"Too Many Requests")
        assert parsed.headers == [(b"Retry-After", b"7")]
        assert not parsed.interim
        assert parse_head(_head(b"HTTP/1.1 100 Continue")).interim


class TestStrictFramingOverSockets:
    @pytest.mark.parametrize(
        ("answer", "message"),
        [
            (
                _head(H11, b"content-length: 3", b"transfer-encoding: chunked")
                + b"\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
                "both transfer-encoding and content-length",
            ),
            (_head(H11, b"content-length: -1") + b"\r\n\r\nabc", "bad content-length b'-1'"),
            (
                _head(H11, b"content-length: 2", b"content-length: 3") + b"\r\n\r\nabc",
                "conflicting content-length values (2, 3)",
            ),
        ],
    )
    def test_an_ambiguous_response_fails_at_once_and_closes_its_connection(
        self, answer: bytes, message: str
    ) -> None:
        """No hang, no wrong body: the error names the fault; the connection is gone."""

        async def go() -> None:
            async with RawServer(
                [answer], [b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"]
            ) as server:
                transport = AsyncioTransport()
                with pytest.raises(httpx2.RemoteProtocolError, match=re.escape(message)):
                    await asyncio.wait_for(_get(transport, server.url), 5)
                assert (transport.open_connections, transport.idle_connections) == (0, 0)
                assert await _get(transport, server.url) == (200, [])
            assert server.connections == 2

        run(go())

    def test_back_to_back_requests_to_an_http10_server_all_succeed(self) -> None:
        """http.server answers HTTP/1.0 with a length and closes: each request gets a new
        connection (before, half of them went out on a connection the server had closed)."""

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length", "0")))
                self.send_response(200)
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: object) -> None:
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        url = httpx2.URL(f"http://127.0.0.1:{server.server_address[1]}/")

        async def go() -> list[tuple[int, list[bytes]]]:
            transport = AsyncioTransport()
            try:
                return [await _get(transport, url) for _ in range(200)]
            finally:
                await transport.aclose()

        try:
            results = run(go())
        finally:
            server.shutdown()
            server.server_close()
            thread.join(5)
        assert results == [(200, [b"ok"])] * 200


class TestPool:
    def test_a_kept_connection_carries_the_next_request(self) -> None:
        async def go() -> None:
            ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
            async with RawServer([ok], [ok], [ok]) as server:
                transport = AsyncioTransport()
                for _ in range(3):
                    assert await _get(transport, server.url) == (200, [b"ok"])
            assert server.connections == 1

        run(go())

    def test_connection_close_is_honoured(self) -> None:
        async def go() -> None:
            close = b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok"
            async with RawServer([close], [close], close_after=True) as server:
                transport = AsyncioTransport()
                await _get(transport, server.url)
                await _get(transport, server.url)
            assert server.connections == 2

        run(go())

    def test_an_idle_connection_the_server_closed_is_not_reused(self) -> None:
        async def go() -> None:
            ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
            async with RawServer([ok], [ok], close_after=True) as server:
                transport = AsyncioTransport()
                await _get(transport, server.url)
                await asyncio.sleep(0.05)  # the server has closed its end meanwhile
                assert await _get(transport, server.url) == (200, [b"ok"])
            assert server.connections == 2

        run(go())

    def test_a_response_closed_early_closes_its_connection(self) -> None:
        async def go() -> None:
            async with RawServer([OK_CHUNKED + b"3\r\nabc\r\n", 1.0]) as server:
                transport = AsyncioTransport()
                response = await transport.send(
                    "POST", server.url, _headers(server.url), b"", httpx2.Timeout(5.0)
                )
                assert await response.body.__aiter__().__anext__() == b"abc"
                await response.aclose()
                assert (transport.open_connections, transport.idle_connections) == (0, 0)

        run(go())

    def test_idle_connections_expire(self) -> None:
        async def go() -> None:
            ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
            async with RawServer([ok]) as server:
                transport = AsyncioTransport(keepalive_expiry=0.05)
                await _get(transport, server.url)
                assert transport.idle_connections == 1
                await asyncio.sleep(0.4)
                assert (transport.open_connections, transport.idle_connections) == (0, 0)

        run(go())

    def test_pool_timeout_when_every_connection_is_busy(self) -> None:
        async def go() -> None:
            slow: list[bytes | float] = [OK_CHUNKED + b"1\r\na\r\n", 0.5, b"0\r\n\r\n"]
            ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
            async with RawServer(slow, [ok]) as server:
                transport = AsyncioTransport(max_connections=1)
                busy = asyncio.create_task(_get(transport, server.url))
                await asyncio.sleep(0.1)
                with pytest.raises(httpx2.PoolTimeout, match="all 1 connections stayed busy"):
                    await _get(transport, server.url, read_limit=0.1)
                assert await busy == (200, [b"a"])
                assert await _get(transport, server.url) == (200, [b"ok"])

        run(go())

    def test_read_timeout_between_chunks(self) -> None:
        async def go() -> None:
            async with RawServer([OK_CHUNKED + b"1\r\na\r\n", 1.0]) as server:
                transport = AsyncioTransport()
                with pytest.raises(httpx2.ReadTimeout, match=r"no data from the server for 0\.2 s"):
                    await _get(transport, server.url, read_limit=0.2)
            assert transport.open_connections == 0

        run(go())

    def test_connect_error_names_the_address(self) -> None:
        async def go() -> None:
            async with RawServer() as server:
                url = server.url
            with pytest.raises(
                httpx2.ConnectError, match=f"could not connect to 127.0.0.1:{url.port}"
            ):
                await _get(AsyncioTransport(), url)

        run(go())

    @pytest.mark.parametrize(
        ("kwargs", "message"),
        [
            ({"max_connections": 0}, "max_connections must be at least 1, got 0"),
            ({"max_idle": -1}, "max_idle must not be negative, got -1"),
            ({"keepalive_expiry": -1.0}, "keepalive_expiry must not be negative, got -1.0"),
        ],
    )
    def test_bad_settings_are_refused_at_construction(
        self, kwargs: dict[str, Any], message: str
    ) -> None:
        with pytest.raises(ValueError, match=message):
            AsyncioTransport(**kwargs)

    def test_only_http_and_https(self) -> None:
        async def go() -> None:
            url = httpx2.URL("ftp://127.0.0.1/x")
            with pytest.raises(httpx2.UnsupportedProtocol, match="not 'ftp'"):
                await _get(AsyncioTransport(), url)

        run(go())


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1, made by the openssl command."""
    openssl = shutil.which("openssl")
    if openssl is None:  # pragma: no cover - Debian images ship it
        pytest.fail("the TLS test needs the openssl command (apt-get install openssl)")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            *(openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"),
            *("-keyout", str(key), "-out", str(cert)),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


class TestTLS:
    def _serve(self, cert: Path, key: Path) -> Callable[[], Any]:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert, key)

        async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\nsecure")
            await writer.drain()
            writer.close()

        return lambda: asyncio.start_server(answer, "127.0.0.1", 0, ssl=context)

    def test_https_with_a_trusted_certificate(self, certificate: tuple[Path, Path]) -> None:
        cert, key = certificate

        async def go() -> None:
            server = await self._serve(cert, key)()
            port = server.sockets[0].getsockname()[1]
            url = httpx2.URL(f"https://127.0.0.1:{port}/")
            trusting = ssl.create_default_context(cafile=str(cert))
            assert await _get(AsyncioTransport(ssl_context=trusting), url) == (200, [b"secure"])
            with pytest.raises(httpx2.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                await _get(AsyncioTransport(), url)  # the system's trust store: refused
            server.close()

        run(go())


class TestSDKClientsOnTheTransport:
    def test_anthropic_sdk_streams_and_raises_its_own_errors(self) -> None:
        async def go() -> None:
            with AnthropicServer([reply("hello"), RateLimit(2.0)]) as server:
                client = anthropic.AsyncAnthropic(
                    api_key=KEY,
                    base_url=server.base_url,
                    max_retries=0,
                    http_client=httpx2.AsyncClient(transport=AsyncioTransport()),
                )
                stream = await client.messages.create(
                    model="m",
                    max_tokens=5,
                    messages=[{"role": "user", "content": "hi"}],
                    stream=True,
                )
                text = [e.delta.text async for e in stream if e.type == "content_block_delta"]  # type: ignore[union-attr]
                assert "".join(text) == "hello"
                with pytest.raises(anthropic.RateLimitError) as caught:
                    await client.messages.create(
                        model="m", max_tokens=5, messages=[{"role": "user", "content": "hi"}]
                    )
                assert caught.value.response.headers["retry-after"] == "2"
                await client.close()

        run(go())

    def test_openai_sdk_completes(self) -> None:
        async def go() -> None:
            with OpenAIServer([reply("fine")]) as server:
                client = openai.AsyncOpenAI(
                    api_key="sk-proj-transport",
                    base_url=server.base_url,
                    max_retries=0,
                    http_client=httpx2.AsyncClient(transport=AsyncioTransport()),
                )
                done = await client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "hi"}]
                )
                assert done.choices[0].message.content == "fine"
                await client.close()

        run(go())


def _work_tool() -> ToolSpec:
    async def work(arguments: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        return ToolOutput(f"did {arguments['n']}")

    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    return ToolSpec("work", "Do unit n.", schema, work)


SCRIPT = [reply("working", tool_call("work", {"n": 7}, id="toolu_1")), reply("all done")]


async def _run_loop(provider: Any) -> Any:
    harness = Harness(HarnessParams(model=f"{provider.name}:m-1", tools=[_work_tool()]), [provider])
    try:
        return await harness.run("go")
    finally:
        await provider.aclose()


class TestWireRoute:
    @pytest.mark.parametrize(
        ("server_cls", "provider_cls"),
        [(AnthropicServer, AnthropicProvider), (OpenAIServer, OpenAIProvider)],
    )
    def test_the_loop_runs_the_same_on_both_routes(
        self, server_cls: type, provider_cls: type
    ) -> None:
        """Same requests on the wire (body and the SDK's auth and version headers), same
        history, on the SDK's route and written on AsyncioTransport."""
        seen = {}
        for route in ("sdk", "wire"):
            with server_cls(list(SCRIPT)) as server:
                transport = AsyncioTransport() if route == "wire" else None
                provider = provider_cls(KEY, base_url=server.base_url, transport=transport)
                state = asyncio.run(_run_loop(provider))
                requests = list(server.requests)
            assert state.exit_reason == "model_complete"
            seen[route] = (
                list(state.history),
                [r.body for r in requests],
                [
                    (r.headers.get("authorization"), r.headers.get("anthropic-version"))
                    for r in requests
                ],
            )
            assert requests[0].headers["authorization"] == f"Bearer {KEY}"
        assert seen["wire"] == seen["sdk"]
        assert seen["wire"][0][-1].text == "all done"

    def test_the_route_never_shows_the_key(self) -> None:
        provider = AnthropicProvider(
            KEY, base_url="http://127.0.0.1:9", transport=AsyncioTransport()
        )
        assert provider.route is not None
        assert KEY not in repr(provider.route)
        assert KEY not in repr(provider)
        assert "http://127.0.0.1:9/v1/messages" in repr(provider.route)

    def test_a_client_without_static_credentials_is_refused_at_construction(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
        monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
        client = anthropic.AsyncAnthropic(api_key=None, base_url="http://127.0.0.1:9")
        with pytest.raises(ValueError, match="AsyncAnthropic has no static API key or token"):
            AnthropicProvider(client=client, transport=AsyncioTransport())

    def test_gzip_bodies_are_decoded(self) -> None:
        """A gzip-encoded error body still names the error."""
        error = {"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}}
        body = gzip.compress(json.dumps(error).encode())
        head = (
            b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n"
            b"content-encoding: gzip\r\ncontent-length: %d\r\n\r\n" % len(body)
        )

        async def go() -> None:
            async with RawServer([head + body]) as server:
                base = f"http://127.0.0.1:{server.port}"
                provider = AnthropicProvider(KEY, base_url=base, transport=AsyncioTransport())
                payload = {"model": "m", "messages": [], "stream": True}
                with pytest.raises(ProviderError, match="invalid_request_error: bad") as caught:
                    await provider.complete(WireRequest("anthropic", "m", payload))
                assert caught.value.status == 400
                assert caught.value.category == "fatal"

        run(go())


class TestAbortOnTheWireRoute:
    def test_abort_mid_stream_closes_the_connection_and_frees_its_slot(self) -> None:
        """An abort while the model streams (5 s of deltas): the run ends at once, aborted,
        with a valid history; the connection is closed, and the transport's only slot
        serves the next call."""

        async def go() -> None:
            slow = SlowReply(reply("x" * 400), tokens_per_second=20.0)
            with AnthropicServer([slow, reply("after")], chunk_size=4) as server:
                transport = AsyncioTransport(max_connections=1)
                provider = AnthropicProvider(KEY, base_url=server.base_url, transport=transport)
                harness = Harness(HarnessParams(model="anthropic:m-1"), [provider])
                run = harness.start("go")
                deltas, started = 0, time.monotonic()
                async for event in run.events():
                    if event.type == "text_delta":
                        deltas += 1
                        if deltas == 2:
                            run.abort()
                assert time.monotonic() - started < 2.0
                assert (run.state.exit_reason, deltas) == ("aborted", 2)
                assert_valid_history(run.state.history)
                assert (transport.open_connections, transport.idle_connections) == (0, 0)
                state = await Harness(HarnessParams(model="anthropic:m-1"), [provider]).run("again")
                assert state.history[-1].text == "after"
                await provider.aclose()

        run(go())


@pytest.mark.parametrize("route", ["sdk", "wire"])
@pytest.mark.parametrize(
    ("server_cls", "provider_cls"),
    [(AnthropicServer, AnthropicProvider), (OpenAIServer, OpenAIProvider)],
)
def test_run_sync_twice_with_one_provider(server_cls: type, provider_cls: type, route: str) -> None:
    """Each ``run_sync`` runs on an event loop of its own; the second must not use the
    first loop's connections, and no request may be sent twice."""
    with server_cls([reply("one"), reply("two")]) as server:
        transport = AsyncioTransport() if route == "wire" else None
        provider = provider_cls(KEY, base_url=server.base_url, transport=transport)
        harness = Harness(HarnessParams(model=f"{provider.name}:m-1"), [provider])
        first, second = harness.run_sync("go"), harness.run_sync("go")
        requests = len(server.requests)
    assert [s.exit_reason for s in (first, second)] == ["model_complete"] * 2
    assert [s.history[-1].text for s in (first, second)] == ["one", "two"]
    assert requests == 2


@pytest.mark.parametrize("route", ["sdk", "wire"])
@pytest.mark.parametrize(
    ("server_cls", "provider_cls"),
    [(AnthropicServer, AnthropicProvider), (OpenAIServer, OpenAIProvider)],
)
def test_run_sync_leaves_no_connection_behind(
    server_cls: type, provider_cls: type, route: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The connections a run's event loop opened are closed by that loop as it ends: the
    client the provider built for it is closed, the transport keeps no idle connection,
    and collecting the old client warns of nothing (before: unclosed transports, and
    "Task exception was never retrieved ... Event loop is closed")."""
    with server_cls([reply("one"), reply("two"), reply("three")]) as server:
        transport = AsyncioTransport() if route == "wire" else None
        provider = provider_cls(KEY, base_url=server.base_url, transport=transport)
        harness = Harness(HarnessParams(model=f"{provider.name}:m-1"), [provider])
        clients = []
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(3):
                assert harness.run_sync("go").exit_reason == "model_complete"
                clients.append(provider.client)
                if transport is not None:
                    assert (transport.open_connections, transport.idle_connections) == (0, 0)
            gc.collect()
        asyncio.run(provider.aclose())
    assert [str(w.message) for w in caught] == []
    assert [r.getMessage() for r in caught_records(caplog)] == []
    if route == "sdk":
        assert len({id(c) for c in clients}) == 3  # one client per loop
        assert all(c.is_closed() for c in clients)


def caught_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """What asyncio logged: unretrieved task exceptions, unclosed resources."""
    return [r for r in caplog.records if r.name == "asyncio" and r.levelno >= logging.WARNING]


def test_a_long_lived_loop_keeps_its_client_until_aclose() -> None:
    """On one loop the provider keeps one client and its connections; aclose closes it
    and drops the duty to close it at the loop's end."""

    async def go() -> None:
        with AnthropicServer([reply("one"), reply("two")]) as server:
            provider = AnthropicProvider(KEY, base_url=server.base_url)
            payload = {"model": "m", "max_tokens": 5, "messages": [], "stream": True}
            request = WireRequest("anthropic", "m", payload)
            await provider.complete(request)
            client = provider.client
            await provider.complete(request)
            assert provider.client is client
            assert not client.is_closed()
            duties = [t for t in asyncio.all_tasks() if "loop's end" in t.get_name()]
            assert len(duties) == 1
            await provider.aclose()
            await asyncio.sleep(0)
            assert client.is_closed()
            assert duties[0].done()

    run(go())
