"""A loopback Amazon Bedrock runtime serving Claude: ``InvokeModelWithResponseStream``
(``POST /model/{model-id}/invoke-with-response-stream``) and ``InvokeModel``
(``.../invoke``), over real HTTP on 127.0.0.1.

It checks what Bedrock checks before a model sees a request: the route, a SigV4
``Authorization`` header for its test credentials (shape, credential scope, signed
headers, ``x-amz-date``, and the signature itself), and the body (``anthropic_version:
bedrock-2023-05-31``; no ``model`` or ``stream``, which the path carries). A failed check
is answered as Bedrock answers it (403 or 400, ``x-amzn-ErrorType``, ``{"message": ...}``).

Answers stream in AWS event-stream framing (``application/vnd.amazon.eventstream``):
each Messages API event is a ``chunk`` event whose payload is ``{"bytes": base64(event
JSON)}``, encoded here (:func:`event_message`) as the AWS SDKs decode it. The script is
:class:`~innerloop.testing.AnthropicServer`'s: replies, and the faults that make sense for
Bedrock. A :class:`~innerloop.testing.RateLimit` is a 429 ``ThrottlingException``; a
:class:`~innerloop.testing.StreamError` is an exception message mid-stream (``StreamError(
"throttlingException", ...)``, ``"modelStreamErrorException"``; an Anthropic error type
is named as Bedrock names it); ``Fault.overloaded()`` is Bedrock's 503
``ServiceUnavailableException``; :class:`~innerloop.testing.Truncated` and
``Fault.dropped()`` cut the stream; ``Fault("corrupt_frame")`` sends a frame whose
checksum is wrong.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import re
import struct
import urllib.parse
import zlib
from collections.abc import Iterable, Mapping
from typing import Any, cast

from innerloop.testing._scripted import Fault, Reply, ScriptStep, reply
from innerloop.testing._servers import AnthropicServer, Oversized, Trickle, _Plan

__all__ = ["BEDROCK_VERSION", "BedrockServer", "event_message"]

BEDROCK_VERSION = "bedrock-2023-05-31"
"""The ``anthropic_version`` Bedrock requires in the body."""

EVENT_STREAM = "application/vnd.amazon.eventstream"

_STRING = 7  # the event-stream header value type of a UTF-8 string


def event_message(headers: Mapping[str, str], payload: bytes) -> bytes:
    """One event-stream message: the prelude (total length, headers length, CRC32 of
    both), the headers (each a name, the string type and a value), the payload, and the
    CRC32 of everything before it."""
    head = bytearray()
    for name, value in headers.items():
        raw_name, raw_value = name.encode(), value.encode()
        head += struct.pack(">B", len(raw_name)) + raw_name
        head += struct.pack(">BH", _STRING, len(raw_value)) + raw_value
    total = 12 + len(head) + len(payload) + 4
    prelude = struct.pack(">II", total, len(head))
    prelude += struct.pack(">I", zlib.crc32(prelude))
    message = prelude + bytes(head) + payload
    return message + struct.pack(">I", zlib.crc32(message))


def chunk_message(event: bytes) -> bytes:
    """A ``chunk`` event carrying one Messages API stream event (its JSON, as given)."""
    payload = json.dumps({"bytes": base64.b64encode(event).decode()}).encode()
    headers = {
        ":event-type": "chunk",
        ":content-type": "application/json",
        ":message-type": "event",
    }
    return event_message(headers, payload)


def exception_message(exception_type: str, message: str) -> bytes:
    """An exception message (``throttlingException``, ...) that ends the stream."""
    headers = {
        ":exception-type": exception_type,
        ":content-type": "application/json",
        ":message-type": "exception",
    }
    return event_message(headers, json.dumps({"message": message}).encode())


_ROUTE = re.compile(r"/model/(?P<model>[^/]+)/(?P<action>invoke|invoke-with-response-stream)")
_AUTHORIZATION = re.compile(
    r"AWS4-HMAC-SHA256 Credential=(?P<key>[^/]+)/(?P<date>\d{8})/(?P<region>[^/]+)/"
    r"(?P<service>[^/]+)/aws4_request, SignedHeaders=(?P<signed>[a-z0-9;-]+), "
    r"Signature=(?P<signature>[0-9a-f]{64})"
)
_AMZ_DATE = re.compile(r"\d{8}T\d{6}Z")

_EXCEPTIONS = {
    "rate_limit_error": "ThrottlingException",
    "overloaded_error": "ServiceUnavailableException",
    "api_error": "InternalServerException",
    "invalid_request_error": "ValidationException",
    "authentication_error": "UnrecognizedClientException",
    "permission_error": "AccessDeniedException",
    "not_found_error": "ResourceNotFoundException",
}
"""An Anthropic error type of a script step -> the exception Bedrock names instead."""


def _exception_name(error_type: str) -> str:
    """Bedrock's exception name for ``error_type`` (given as Anthropic's, or already
    Bedrock's), as an HTTP error names it: ``ThrottlingException``."""
    name = _EXCEPTIONS.get(error_type, error_type)
    return name[:1].upper() + name[1:]


def _sse_data(frame: bytes) -> bytes | None:
    """The data of one server-sent event, as written by the loopback servers."""
    for line in frame.split(b"\n"):
        if line.startswith(b"data:"):
            return line[5:].removeprefix(b" ")
    return None


class _BodyRecorder:
    """A connection's reader that keeps the last body read (``readexactly``): a
    signature covers the body's bytes, not the JSON they parse to."""

    def __init__(self, reader: asyncio.StreamReader, server: BedrockServer) -> None:
        self._reader = reader
        self._server = server

    async def readline(self) -> bytes:
        return await self._reader.readline()

    async def readexactly(self, n: int) -> bytes:
        raw = await self._reader.readexactly(n)
        self._server._raw_body = raw  # read by _plan before the loop runs anything else
        return raw


class BedrockServer(AnthropicServer):
    """Amazon Bedrock's runtime for Claude. Give ``AsyncAnthropicBedrock`` the test
    credentials: ``aws_access_key=server.access_key, aws_secret_key=server.secret_key,
    aws_region=server.region, base_url=server.url`` (and ``aws_session_token=`` when the
    server has a ``session_token``), or ``api_key=`` when it has an ``api_key``."""

    dialect = "anthropic"
    path = "/model/{model-id}/invoke-with-response-stream"

    def __init__(
        self,
        script: Iterable[ScriptStep] = (),
        *,
        access_key: str = "AKIDLOOPBACK00000000",
        secret_key: str = "loopback/secret/key/0123456789abcdefghijk",
        region: str = "us-east-1",
        session_token: str | None = None,
        api_key: str | None = None,
        model: str = "claude-sonnet-4-5-20250929",
        chunk_size: int = 16,
    ) -> None:
        super().__init__(script, model=model, chunk_size=chunk_size)
        self.access_key = access_key
        self.secret_key = secret_key
        self.region = region
        self.session_token = session_token
        """Required (signed, in ``x-amz-security-token``) when set; refused when not."""
        self.api_key = api_key
        """A Bedrock API key, accepted as ``Authorization: Bearer`` instead of SigV4."""
        self._raw_body = b""

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        recorder = cast(asyncio.StreamReader, _BodyRecorder(reader, self))
        while await self._request(recorder, writer):
            pass

    # -- what Bedrock checks --------------------------------------------------------------

    def _plan(self, path: str, body: Any) -> _Plan:
        route = _ROUTE.fullmatch(path)
        if route is None:
            message = f"no route {path}; this serves {self.path}"
            return self._error(404, "UnknownOperationException", message)
        request = self.requests[-1]  # the one being served
        problem = self._auth_problem(request.method, path, request.headers)
        if problem is not None:
            return self._error(403, "InvalidSignatureException", problem)
        problem = self._body_problem(body)
        if problem is not None:
            return self._error(400, "ValidationException", problem)
        # the model in the path is Bedrock's id; the answer names the model (``model``)
        stream = route["action"] == "invoke-with-response-stream"
        return super()._plan(self.path, {"stream": stream})

    def _auth_problem(self, method: str, path: str, headers: Mapping[str, str]) -> str | None:
        """What is wrong with the request's credentials (a SigV4 signature, or the
        server's ``api_key`` as a bearer token), or None."""
        given = headers.get("authorization", "")
        if self.api_key is not None and hmac.compare_digest(given, f"Bearer {self.api_key}"):
            return None
        auth = _AUTHORIZATION.fullmatch(given)
        if auth is None:
            return (
                "Authorization header requires 'AWS4-HMAC-SHA256 Credential=.../aws4_request, "
                "SignedHeaders=..., Signature=...'"
                + (" (or this server's api_key as a Bearer token)" if self.api_key else "")
            )
        problem = self._scope_problem(auth, headers)
        if problem is None:
            signed = auth["signed"].split(";")
            expected = self._signature(method, path, headers, signed, auth["date"])
            if not hmac.compare_digest(expected, auth["signature"]):
                problem = (
                    "The request signature we calculated does not match the signature you "
                    "provided (with this server's secret_key)"
                )
        return problem

    def _scope_problem(self, auth: re.Match[str], headers: Mapping[str, str]) -> str | None:
        """The credential scope, the date and the signed headers, before the signature."""
        amz_date = headers.get("x-amz-date", "")
        scope = (auth["key"], auth["region"], auth["service"])
        signed = set(auth["signed"].split(";"))
        token = headers.get("x-amz-security-token")
        if scope != (self.access_key, self.region, "bedrock"):
            want = f"{self.access_key}/{self.region}/bedrock"
            return f"credential scope {'/'.join(scope)} is not {want}"
        if not _AMZ_DATE.fullmatch(amz_date) or amz_date[:8] != auth["date"]:
            return f"x-amz-date {amz_date!r} does not match the credential date {auth['date']}"
        if not {"host", "x-amz-date"} <= signed or not signed <= set(headers):
            return f"SignedHeaders {auth['signed']} must sign host and x-amz-date, and be sent"
        if token != self.session_token:
            return "The security token included in the request is invalid (x-amz-security-token)"
        if token is not None and "x-amz-security-token" not in signed:
            return "x-amz-security-token must be signed"
        return None

    def _signature(
        self,
        method: str,
        path: str,
        headers: Mapping[str, str],
        signed: list[str],
        date: str,
    ) -> str:
        """SigV4 over the request as received, from AWS's published algorithm: written
        here, not borrowed from botocore, so that it checks botocore's signing rather
        than repeating it."""
        canonical_path = urllib.parse.quote(path, safe="/~")
        canonical_headers = "".join(f"{h}:{' '.join(headers[h].split())}\n" for h in signed)
        canonical = "\n".join(
            [
                method,
                canonical_path,
                "",
                canonical_headers,
                ";".join(signed),
                hashlib.sha256(self._raw_body).hexdigest(),
            ]
        )
        scope = f"{date}/{self.region}/bedrock/aws4_request"
        to_sign = "\n".join(
            [
                "AWS4-HMAC-SHA256",
                headers["x-amz-date"],
                scope,
                hashlib.sha256(canonical.encode()).hexdigest(),
            ]
        )
        key = ("AWS4" + self.secret_key).encode()
        for part in (date, self.region, "bedrock", "aws4_request"):
            key = hmac.new(key, part.encode(), hashlib.sha256).digest()
        return hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()

    @staticmethod
    def _body_problem(body: Any) -> str | None:
        if not isinstance(body, dict):
            return "Malformed input request: the body is not a JSON object"
        version = body.get("anthropic_version")
        if version != BEDROCK_VERSION:
            return f"anthropic_version must be {BEDROCK_VERSION!r}, got {version!r}"
        extra = sorted({"model", "stream"} & body.keys())
        if extra:
            return f"Malformed input request: extraneous key {extra} is not permitted"
        return None

    # -- answers in Bedrock's framing -----------------------------------------------------

    def frames(self, r: Reply, model: str) -> list[bytes]:
        """The Messages API events (no pings), ``message_stop`` with Bedrock's metrics."""
        frames = [f for f in super().frames(r, model) if not f.startswith(b"event: ping\n")]
        metrics = {
            "inputTokenCount": r.usage.input_tokens,
            "outputTokenCount": r.usage.output_tokens,
            "invocationLatency": 0,
            "firstByteLatency": 0,
        }
        stop = {"type": "message_stop", "amazon-bedrock-invocationMetrics": metrics}
        frames[-1] = b"event: message_stop\ndata: " + json.dumps(stop).encode() + b"\n\n"
        return frames

    def _events(self, frames: list[bytes]) -> _Plan:
        """Server-sent events as chunk messages (a frame already in Bedrock's framing, such
        as an exception message, is sent as it is)."""
        messages = []
        for frame in frames:
            data = _sse_data(frame) if frame.startswith((b"event:", b"data:")) else None
            messages.append(frame if data is None else chunk_message(data))
        return self._framed(messages)

    def _framed(self, chunks: list[bytes]) -> _Plan:
        headers = [
            ("content-type", EVENT_STREAM),
            ("x-amzn-bedrock-content-type", "application/json"),
            ("x-amzn-requestid", f"00000000-0000-0000-0000-{next(self._ids):012d}"),
        ]
        return _Plan(200, headers, chunks, stream=True)

    def error_frame(self, error_type: str, message: str) -> bytes:
        name = _exception_name(error_type)
        return exception_message(name[:1].lower() + name[1:], message)

    def error_json(self, error_type: str, message: str) -> dict[str, Any]:
        return {"message": message}

    def _error(self, status: int, error_type: str, message: str) -> _Plan:
        name = _exception_name(error_type)
        if name == "ServiceUnavailableException":
            status = 503  # Bedrock has no 529
        plan = self._json(status, self.error_json(error_type, message))
        plan.headers.append(
            ("x-amzn-errortype", f"{name}:http://internal.amazon.com/coral/com.amazon.bedrock/")
        )
        return plan

    def prompt_too_long(self) -> _Plan:
        return self._error(400, "ValidationException", "Input is too long for requested model.")

    def _broken_stream(self, fault: Fault, model: str) -> _Plan | None:
        if fault.kind == "corrupt_frame":
            frames = self.frames(reply("this stream breaks"), model)
            messages = [chunk_message(_sse_data(f) or b"") for f in frames]
            broken = bytearray(messages[1])
            broken[-1] ^= 0xFF  # the message CRC no longer matches
            return self._framed([messages[0], bytes(broken), *messages[2:]])
        return super()._broken_stream(fault, model)

    def _render_oversized(self, step: Oversized, model: str) -> _Plan:
        chunk_size, self.chunk_size = self.chunk_size, step.size
        try:
            frames = self.frames(reply("x" * step.size), model)
        finally:
            self.chunk_size = chunk_size
        body = b"".join(chunk_message(_sse_data(f) or b"") for f in frames)
        return self._framed([body[i : i + step.piece] for i in range(0, len(body), step.piece)])

    def _render_trickle(self, step: Trickle, model: str) -> _Plan:
        raise NotImplementedError("Trickle is a server-sent-events fault; Bedrock frames events")
