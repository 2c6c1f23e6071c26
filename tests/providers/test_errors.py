"""Every provider failure maps to one category of a closed set, with no API key in it."""

from __future__ import annotations

import asyncio
import email.utils
import importlib
import json
import ssl
from typing import Any

import httpx2
import pytest

from innerloop import ProviderError
from innerloop.lowlevel import error_from_exception, error_from_status, parse_retry_after
from innerloop.providers import AnthropicProvider, AsyncioTransport, OpenAIProvider, WireRequest
from innerloop.providers._errors import EXCEPTION_TABLE, category_of
from innerloop.testing import (
    AnthropicServer,
    Fault,
    OpenAIServer,
    Oversized,
    RateLimit,
    Raw,
    SlowReply,
    Trickle,
    reply,
)
from innerloop.testing._servers import Step

NOW = 1_700_000_000.0
KEY = "sk-ant-api03-SECRETSECRETSECRET0123"
JSON = (("content-type", "application/json"),)
TOO_LONG = "prompt is too long: 210000 tokens > 200000 maximum"


class TestRetryAfter:
    @pytest.mark.parametrize(
        ("headers", "seconds"),
        [
            ({"retry-after": "7"}, 7.0),
            ({"Retry-After": "1.5"}, 1.5),
            ({"retry-after-ms": "2500"}, 2.5),
            ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),
            ({"retry-after": email.utils.formatdate(NOW + 42, usegmt=True)}, 42.0),
            ({"retry-after": email.utils.formatdate(NOW - 42, usegmt=True)}, 0.0),
            ({"retry-after": "soon"}, None),
            ({}, None),
        ],
    )
    def test_each_form_becomes_seconds(
        self, headers: dict[str, str], seconds: float | None
    ) -> None:
        """Seconds, milliseconds and HTTP dates all become seconds from now."""
        assert parse_retry_after(headers, now=lambda: NOW) == seconds


def _anthropic(kind: str, message: str) -> str:
    return json.dumps({"type": "error", "error": {"type": kind, "message": message}})


def _openai(kind: str, message: str, code: str | None = None) -> str:
    return json.dumps({"error": {"message": message, "type": kind, "param": None, "code": code}})


_LLAMA_500 = json.dumps(  # llama.cpp's server, for an assistant message with content null
    {
        "error": {
            "message": "[{'type': 'string_type', 'loc': ('body', 'messages', 1, 'typed-dict',"
            " 'content'), 'msg': 'Input should be a valid string', 'input': None}]",
            "type": "internal_server_error",
        }
    }
)


class TestStatusMapping:
    @pytest.mark.parametrize(
        ("status", "body", "category"),
        [
            (429, _anthropic("rate_limit_error", "slow down"), "rate_limited"),
            (429, _openai("requests", "Rate limit reached", "rate_limit_exceeded"), "rate_limited"),
            (529, _anthropic("overloaded_error", "Overloaded"), "overloaded"),
            (500, _anthropic("api_error", "Internal server error"), "transient"),
            (502, "<html>Bad Gateway</html>", "transient"),
            (503, "", "transient"),
            (408, "", "transient"),
            (400, _anthropic("invalid_request_error", TOO_LONG), "context_overflow"),
            (
                400,
                _openai("invalid_request_error", "long", "context_length_exceeded"),
                "context_overflow",
            ),
            (400, _anthropic("invalid_request_error", "max_tokens: field required"), "fatal"),
            (401, _anthropic("authentication_error", "invalid x-api-key"), "fatal"),
            (403, _anthropic("permission_error", "no access"), "fatal"),
            (404, _openai("invalid_request_error", "no model `x`", "model_not_found"), "fatal"),
            # the request's shape refused, even as a 500: the same request fails again
            (500, _LLAMA_500, "fatal"),
            (500, '{"detail": "1 validation error for ChatCompletionRequest"}', "fatal"),
            (422, '{"detail": [{"msg": "Field required"}]}', "fatal"),
            (422, "", "fatal"),
        ],
    )
    def test_category(self, status: int, body: str, category: str) -> None:
        """The status and the body's error type decide the category."""
        error = error_from_status("p", status, {}, body)
        assert error.category == category
        assert error.status == status
        assert error.retryable is (category != "fatal")

    def test_message_names_type_and_text(self) -> None:
        """The message carries the provider's error type and text."""
        body = _anthropic("rate_limit_error", "slow down")
        error = error_from_status("anthropic", 429, {"retry-after": "3"}, body)
        assert str(error) == "anthropic HTTP 429 rate_limited: rate_limit_error: slow down"
        assert error.retry_after == 3.0

    def test_no_api_key_survives(self) -> None:
        """A key echoed back in a body is scrubbed from message and raw body."""
        body = _anthropic("authentication_error", f"invalid x-api-key {KEY}")
        error = error_from_status("anthropic", 401, {}, body)
        assert KEY not in str(error)
        assert KEY not in (error.raw or "")
        assert "[redacted]" in error.message


EXPECTED_ROWS = {  # (module, class) -> category: what each row of the table must say
    ("builtins", "Exception"): "fatal",
    ("builtins", "OSError"): "transient",
    ("builtins", "ConnectionError"): "transient",
    ("builtins", "TimeoutError"): "transient",
    ("builtins", "EOFError"): "transient",
    ("builtins", "FileNotFoundError"): "fatal",
    ("builtins", "PermissionError"): "fatal",
    ("builtins", "UnicodeDecodeError"): "transient",
    ("json", "JSONDecodeError"): "transient",
    ("zlib", "error"): "transient",
    ("asyncio", "IncompleteReadError"): "transient",
    ("asyncio", "LimitOverrunError"): "transient",
    ("ssl", "SSLError"): "transient",
    ("ssl", "SSLCertVerificationError"): "fatal",
    ("httpx2", "HTTPError"): "fatal",
    ("httpx2", "TransportError"): "transient",
    ("httpx2", "TimeoutException"): "transient",
    ("httpx2", "NetworkError"): "transient",
    ("httpx2", "ProtocolError"): "transient",
    ("httpx2", "RemoteProtocolError"): "transient",
    ("httpx2", "LocalProtocolError"): "fatal",
    ("httpx2", "ProxyError"): "transient",
    ("httpx2", "UnsupportedProtocol"): "fatal",
    ("httpx2", "DecodingError"): "transient",
    ("httpx2", "TooManyRedirects"): "fatal",
    ("httpx2", "InvalidURL"): "fatal",
    ("httpx2", "StreamError"): "fatal",
    ("anthropic", "AnthropicError"): "fatal",
    ("anthropic", "APIConnectionError"): "transient",
    ("anthropic", "APITimeoutError"): "transient",
    ("anthropic", "APIResponseValidationError"): "transient",
    ("anthropic", "CredentialsError"): "fatal",
    ("openai", "OpenAIError"): "fatal",
    ("openai", "APIConnectionError"): "transient",
    ("openai", "APITimeoutError"): "transient",
    ("openai", "APIResponseValidationError"): "transient",
}


def _bare(cls: type[BaseException]) -> BaseException:
    """An instance made without running ``__init__`` (the SDKs' take a request)."""
    return cls.__new__(cls)


class TestExceptionTable:
    def test_the_table_has_exactly_the_rows_stated_here(self) -> None:
        """No row added, dropped or changed without this test saying so."""
        assert {(m, n): c.value for m, n, c in EXCEPTION_TABLE} == EXPECTED_ROWS
        assert len(EXCEPTION_TABLE) == len(EXPECTED_ROWS)

    @pytest.mark.parametrize(("module", "name"), sorted(EXPECTED_ROWS))
    def test_each_row_maps_as_stated(self, module: str, name: str) -> None:
        """An exception of each listed type gets the category of its own row."""
        cls = getattr(importlib.import_module(module), name)
        error = error_from_exception("p", _bare(cls))
        assert error.category == EXPECTED_ROWS[(module, name)]
        assert error.message.startswith(f"{name}: ")

    @pytest.mark.parametrize(("module", "name"), sorted(EXPECTED_ROWS))
    def test_a_subclass_takes_its_nearest_ancestors_row(self, module: str, name: str) -> None:
        """A class the table does not know maps as the nearest listed class in its MRO."""
        cls = getattr(importlib.import_module(module), name)
        sub = type(f"My{name}", (cls,), {})
        assert category_of(_bare(sub)) == EXPECTED_ROWS[(module, name)]

    def test_the_most_specific_row_wins_over_a_broader_one(self) -> None:
        """A read timeout is a TimeoutException before it is an HTTPError; a certificate
        failure is an SSLError and an OSError, but its own row says fatal."""
        request = httpx2.Request("POST", "http://127.0.0.1:1/")
        assert category_of(httpx2.ReadTimeout("t", request=request)) == "transient"
        assert category_of(httpx2.LocalProtocolError("bad header")) == "fatal"
        assert category_of(ssl.SSLCertVerificationError("unknown ca")) == "fatal"
        assert category_of(ConnectionResetError()) == "transient"
        assert category_of(FileNotFoundError("cafile")) == "fatal"

    def test_a_class_in_two_rows_lineages_takes_the_first_in_its_mro(self) -> None:
        """Multiple inheritance: the MRO order decides, not the table order."""

        class Both(httpx2.LocalProtocolError, ConnectionError):
            pass

        class Other(ConnectionError, httpx2.LocalProtocolError):
            pass

        assert category_of(Both("x")) == "fatal"
        assert category_of(Other("x")) == "transient"

    def test_sdk_connection_errors_are_transient_through_the_real_classes(self) -> None:
        """The SDKs' own constructors: a timeout and a connection error, both transient."""
        import anthropic
        import openai

        request = httpx2.Request("POST", "http://127.0.0.1:1/v1/messages")
        for sdk in (anthropic, openai):
            for exc in (
                sdk.APITimeoutError(request=request),
                sdk.APIConnectionError(request=request),
            ):
                error = error_from_exception("p", exc)
                assert error.category == "transient", exc
                assert error.message.startswith(type(exc).__name__)

    def test_an_http_status_error_maps_by_its_status(self) -> None:
        """httpx's own status error carries its status on the response."""
        request = httpx2.Request("POST", "http://127.0.0.1:1/")
        response = httpx2.Response(429, headers={"retry-after": "2"}, request=request)
        exc = httpx2.HTTPStatusError("429", request=request, response=response)
        error = error_from_exception("p", exc)
        assert (error.category, error.status, error.retry_after) == ("rate_limited", 429, 2.0)


class TestExceptions:
    def test_timeouts_and_dropped_connections_are_transient(self) -> None:
        """Transport failures (timeouts, protocol errors) are transient."""
        request = httpx2.Request("POST", "http://127.0.0.1:1/v1/messages")
        timeout = httpx2.ReadTimeout("timed out", request=request)
        for exc in (timeout, httpx2.RemoteProtocolError("peer closed")):
            assert error_from_exception("p", exc).category == "transient"

    def test_unknown_exceptions_are_fatal(self) -> None:
        """Anything unrecognised is fatal, named in the message."""
        error = error_from_exception("p", KeyError("boom"))
        assert error.category == "fatal"
        assert error.message == "KeyError: 'boom'"


ROUTES = ("sdk", "wire")  # the SDK's request builder, or requests written on AsyncioTransport


def _transport(route: str) -> AsyncioTransport | None:
    return AsyncioTransport() if route == "wire" else None


def _open(server: AnthropicServer | OpenAIServer, route: str = "sdk", **kw: Any) -> ProviderError:
    async def go() -> ProviderError:
        cls = AnthropicProvider if isinstance(server, AnthropicServer) else OpenAIProvider
        provider = cls(KEY, base_url=server.base_url, transport=_transport(route), **kw)
        payload = {"model": "m", "max_tokens": 5, "messages": [], "stream": True}
        request = WireRequest(provider.dialect, "m", payload)
        try:
            await provider.complete(request)
        except ProviderError as exc:
            return exc
        finally:
            await provider.aclose()
        raise AssertionError("no error")

    return asyncio.run(go())


class TestThroughTheSDKs:
    @pytest.mark.parametrize(
        ("step", "category", "retry_after"),
        [
            (RateLimit(3.0), "rate_limited", 3.0),
            (RateLimit(1.5, "ms"), "rate_limited", 1.5),
            (RateLimit(None), "rate_limited", None),
            (Fault.overloaded(), "overloaded", None),
            (Fault.server_error(500), "transient", None),
            (Fault.context_overflow(), "context_overflow", None),
            (Fault.fatal(401), "fatal", None),
            (Fault.fatal(403, "forbidden"), "fatal", None),
            (Raw(500, JSON, _LLAMA_500.encode()), "fatal", None),  # refused for its shape
            (Raw(404, (("content-type", "text/plain"),), b"no such route"), "fatal", None),
            (Fault.empty(), "transient", None),
            (Fault.dropped(), "transient", None),
            (Fault.malformed(), "transient", None),
            (Raw(200, JSON, b""), "transient", None),
            (Raw(200, JSON, b'{"unexpected": true}'), "transient", None),
            (Fault("wrong_shape"), "transient", None),
            (Fault("missing_index"), "transient", None),
            (Fault("corrupt_gzip"), "transient", None),
            (Trickle(100, limit=1000), "transient", None),  # dropped mid-event
        ],
    )
    @pytest.mark.parametrize("route", ROUTES)
    @pytest.mark.parametrize("server_cls", [AnthropicServer, OpenAIServer])
    def test_each_fault_over_http(
        self,
        server_cls: type[AnthropicServer] | type[OpenAIServer],
        step: Step,
        category: str,
        retry_after: float | None,
        route: str,
    ) -> None:
        """Each scripted fault, through the real SDK client, lands in its category (the
        script holds it twice: an empty OpenAI stream is asked again unstreamed)."""
        with server_cls([step, step]) as server:
            error = _open(server, route)
        assert error.category == category
        assert error.retry_after == retry_after
        assert KEY not in str(error)
        assert KEY not in (error.raw or "")

    @pytest.mark.parametrize(
        ("kind", "message"),
        [
            ("wrong_shape", "an event of the wrong shape (AttributeError: "),
            ("missing_index", ""),
            ("corrupt_gzip", "its content-encoding cannot be undone (DecodingError: "),
        ],
    )
    @pytest.mark.parametrize("route", ROUTES)
    @pytest.mark.parametrize("server_cls", [AnthropicServer, OpenAIServer])
    def test_malformed_streams_say_so(
        self, server_cls: type, route: str, kind: str, message: str
    ) -> None:
        """Wrong-shape JSON, a delta without its index and a corrupt gzip body are
        malformed responses on both routes, for both providers."""
        with server_cls([Fault(kind)]) as server:
            error = _open(server, route)
        assert error.category == "transient"
        if kind == "missing_index":
            message = (
                "an event of the wrong shape (KeyError: 'index')"
                if server_cls is AnthropicServer
                else "a tool call delta (index missing) names no function and continues no call"
            )
        assert error.message.startswith(f"malformed response: {message}")

    @pytest.mark.parametrize("step", [Oversized(300_000), Trickle(4096)])
    @pytest.mark.parametrize("route", ROUTES)
    @pytest.mark.parametrize("server_cls", [AnthropicServer, OpenAIServer])
    def test_an_event_past_the_limit_is_malformed(
        self, server_cls: type, route: str, step: object
    ) -> None:
        """An event longer than the provider's max_event_bytes, whole or never ending, is
        a malformed response: the stream stops there, memory does not grow on."""
        with server_cls([step]) as server:
            error = _open(server, route, max_event_bytes=200_000)
        assert error.category == "transient"
        assert error.message.startswith(
            "malformed response: an event is longer than max_event_bytes=200,000 "
        )

    @pytest.mark.parametrize("cls", [AnthropicProvider, OpenAIProvider])
    @pytest.mark.parametrize(("value", "problem"), [(0, ValueError), ("16MB", TypeError)])
    def test_a_bad_event_limit_is_refused_at_construction(
        self, cls: type, value: object, problem: type
    ) -> None:
        """max_event_bytes must be a positive int; the error names it and the default."""
        with pytest.raises(problem, match="max_event_bytes must be"):
            cls(KEY, base_url="http://127.0.0.1:9", max_event_bytes=value)

    @pytest.mark.parametrize("route", ROUTES)
    def test_connection_refused_is_transient(self, route: str) -> None:
        """No server listening: the connection error is transient."""
        server = AnthropicServer().start()
        server.stop()
        error = _open(server, route)
        assert error.category == "transient"
        assert ("ConnectError" if route == "wire" else "APIConnectionError") in error.message


class TestTimeouts:
    def _complete(self, server: AnthropicServer, timeout: float, route: str) -> ProviderError:
        async def go() -> ProviderError:
            provider = AnthropicProvider(
                KEY, base_url=server.base_url, timeout=timeout, transport=_transport(route)
            )
            payload = {"model": "m", "max_tokens": 5, "messages": [], "stream": True}
            try:
                await provider.complete(WireRequest("anthropic", "m", payload))
            except ProviderError as exc:
                return exc
            finally:
                await provider.aclose()
            raise AssertionError("no error")

        return asyncio.run(go())

    @pytest.mark.parametrize("route", ROUTES)
    def test_no_answer_times_out_transient(self, route: str) -> None:
        """A server that never answers: the timeout is transient."""
        with AnthropicServer([Fault.hang()]) as server:
            error = self._complete(server, 0.2, route)
        assert error.category == "transient"
        expected = (
            "ReadTimeout: no data from the server for 0.2 s"
            if route == "wire"
            else "APITimeoutError"
        )
        assert error.message.startswith(expected)

    @pytest.mark.parametrize("route", ROUTES)
    def test_stalled_stream_times_out_transient(self, route: str) -> None:
        """A stream that stalls mid-body times out, transient, said to be mid-stream."""
        slow = SlowReply(reply("x" * 64), tokens_per_second=2.0)
        with AnthropicServer([slow], chunk_size=4) as server:
            error = self._complete(server, 0.2, route)
        assert error.category == "transient"
        assert error.message.startswith("mid-stream: ReadTimeout")
