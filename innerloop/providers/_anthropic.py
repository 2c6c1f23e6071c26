"""The Anthropic Messages API through ``AsyncAnthropic`` (max_retries=0: the machine retries).

Server-side tool blocks (``server_tool_use``, ``web_search_tool_result``, ``mcp_*``, ...)
are run by Anthropic, not by the harness: each is kept verbatim in the canonical message as
a ``ServerToolBlock`` (sent back to Anthropic only) and reported as a ``server_tool`` event.
"""

from __future__ import annotations

import json
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

import httpx2

from innerloop._errors import ErrorCategory, ProviderError
from innerloop._events import (
    ServerToolEvent,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolInputDelta,
    ToolUseComplete,
    ToolUseStart,
)
from innerloop._json import MAX_JSON_DEPTH, wrapped_depth
from innerloop._messages import (
    Block,
    Message,
    ModelResponse,
    RedactedThinkingBlock,
    ServerToolBlock,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
    Usage,
)
from innerloop.providers._errors import error_from_body
from innerloop.providers._eventstream import EventStreamSplitter, botocore_eventstream
from innerloop.providers._http import (
    DEFAULT_MAX_EVENT_BYTES,
    HTTPProvider,
    loads,
    missing_key,
    parse_tool_input,
)
from innerloop.providers._normalize import WireRequest
from innerloop.providers._servertools import ANTHROPIC_SERVER_BLOCKS

__all__ = ["AnthropicAssembler", "AnthropicProvider"]

if TYPE_CHECKING:  # the SDK is imported when a provider is built: it takes seconds
    import anthropic


class _Open:
    """A content block being streamed."""

    __slots__ = ("data", "id", "kind", "name", "parts", "signature")

    def __init__(self, kind: str, id: str = "", name: str = "") -> None:
        self.kind = kind
        self.id = id
        self.name = name
        self.parts: list[str] = []
        self.signature = ""
        self.data: dict[str, Any] = {}
        """A server-tool block as it started (kind ``server``)."""


def _is_server_block(kind: str) -> bool:
    return kind in ANTHROPIC_SERVER_BLOCKS or kind.endswith("_tool_result")


class AnthropicAssembler:
    """Anthropic stream events (as parsed JSON) -> stream events and a ``ModelResponse``."""

    def __init__(self, provider: str, model: str, max_depth: int = MAX_JSON_DEPTH) -> None:
        self.max_depth = max_depth
        self._envelope = wrapped_depth(max_depth)
        self.provider = provider
        self.model = model
        self.started = False
        self.stopped = False
        self.stop_reason: str | None = None
        self.id: str | None = None
        self.usage: dict[str, Any] = {}
        self.open: dict[int, _Open] = {}
        self.blocks: dict[int, Block] = {}

    def feed(self, data: bytes, out: list[StreamEvent]) -> None:
        self.handle(loads(self.provider, data, self._envelope), out)

    def handle(self, event: dict[str, Any], out: list[StreamEvent]) -> None:
        kind = event.get("type")
        if kind == "content_block_delta":
            self._delta(event["index"], event["delta"], out)
        elif kind == "content_block_start":
            self._start(event["index"], event["content_block"], out)
        elif kind == "content_block_stop":
            self._stop(event["index"], out)
        elif kind == "message_start":
            message = event.get("message") or {}
            self.started = True
            self.model = message.get("model") or self.model
            self.id = message.get("id") or self.id
            self._usage(message.get("usage"))
        elif kind == "message_delta":
            self.stop_reason = (event.get("delta") or {}).get("stop_reason") or self.stop_reason
            self._usage(event.get("usage"))
        elif kind == "message_stop":
            self.stopped = True
        elif kind == "error":
            raise error_from_body(self.provider, event)

    def _usage(self, usage: dict[str, Any] | None) -> None:
        if usage:
            self.usage.update((k, v) for k, v in usage.items() if v is not None)

    def _start(self, index: int, block: dict[str, Any], out: list[StreamEvent]) -> None:
        kind = block.get("type", "")
        if kind == "tool_use":
            self.open[index] = _Open(kind, block["id"], block["name"])
            out.append(ToolUseStart(index, block["id"], block["name"]))
        elif kind in ("text", "thinking"):
            opened = self.open[index] = _Open(kind)
            first = block.get(kind) or ""
            if first:
                opened.parts.append(first)
                out.append(
                    TextDelta(index, first) if kind == "text" else ThinkingDelta(index, first)
                )
            opened.signature = block.get("signature") or ""
        elif kind == "redacted_thinking":
            self.blocks[index] = RedactedThinkingBlock(block["data"])
        elif _is_server_block(kind):  # run by Anthropic: kept verbatim, sent back to it
            opened = self.open[index] = _Open("server", str(block.get("id") or ""))
            opened.data = dict(block)

    def _delta(self, index: int, delta: dict[str, Any], out: list[StreamEvent]) -> None:
        opened = self.open.get(index)
        if opened is None:
            return
        kind = delta.get("type")
        if kind == "text_delta":
            text = delta["text"]
            if text:
                opened.parts.append(text)
                out.append(TextDelta(index, text))
        elif kind == "input_json_delta":
            partial = delta["partial_json"]
            if partial:
                opened.parts.append(partial)
                if opened.kind == "tool_use":
                    out.append(ToolInputDelta(index, opened.id, partial))
        elif kind == "thinking_delta":
            text = delta["thinking"]
            if text:
                opened.parts.append(text)
                out.append(ThinkingDelta(index, text))
        elif kind == "signature_delta":
            opened.signature = delta["signature"]

    def _stop(self, index: int, out: list[StreamEvent]) -> None:
        opened = self.open.pop(index, None)
        if opened is None:
            return
        text = "".join(opened.parts)
        if opened.kind == "tool_use":
            call = ToolUseBlock(
                opened.id,
                opened.name,
                parse_tool_input(self.provider, opened.name, text, self.max_depth),
            )
            self.blocks[index] = call
            out.append(ToolUseComplete(index, call))
        elif opened.kind == "thinking":
            self.blocks[index] = ThinkingBlock(text, opened.signature)
        elif opened.kind == "server":
            data = opened.data
            if text:  # a call's input streams as JSON deltas
                data["input"] = parse_tool_input(self.provider, str(data.get("name")), text)
            server = self.blocks[index] = ServerToolBlock("anthropic", data)
            out.append(ServerToolEvent(index, server))
        elif text:
            self.blocks[index] = TextBlock(text)

    def feed_json(self, body: Any, out: list[StreamEvent]) -> None:
        """A non-streaming message, replayed through the streaming path."""
        if not isinstance(body, dict) or body.get("type") != "message":
            raise error_from_body(self.provider, body or {"error": "empty response"})
        handle = self.handle
        handle({"type": "message_start", "message": {**body, "content": []}}, out)
        for index, block in enumerate(body.get("content") or ()):
            kind = block.get("type")
            start, delta = dict(block), None
            if kind == "text":
                start["text"], delta = "", {"type": "text_delta", "text": block["text"]}
            elif kind == "tool_use" or (kind in ANTHROPIC_SERVER_BLOCKS and "input" in block):
                raw = json.dumps(block.get("input") or {})
                start["input"], delta = {}, {"type": "input_json_delta", "partial_json": raw}
            handle({"type": "content_block_start", "index": index, "content_block": start}, out)
            if delta is not None:
                handle({"type": "content_block_delta", "index": index, "delta": delta}, out)
            handle({"type": "content_block_stop", "index": index}, out)
        delta_event = {"stop_reason": body.get("stop_reason")}
        handle({"type": "message_delta", "delta": delta_event, "usage": {}}, out)
        handle({"type": "message_stop"}, out)

    def finish(self, out: list[StreamEvent]) -> ModelResponse:
        if not self.started:
            raise ProviderError(
                ErrorCategory.TRANSIENT, "empty response: no message_start", provider=self.provider
            )
        if self.stop_reason is None:
            raise ProviderError(
                ErrorCategory.TRANSIENT,
                "the stream ended before the message did (no stop_reason)",
                provider=self.provider,
            )
        incomplete: list[str] = []
        for index, opened in list(self.open.items()):
            if opened.kind == "tool_use":
                incomplete.append(opened.id)  # cut off (max_tokens): never executed
            elif opened.kind == "text" and opened.parts:
                self.blocks[index] = TextBlock("".join(opened.parts))
        blocks = tuple(self.blocks[i] for i in sorted(self.blocks))
        u = self.usage
        details = u.get("output_tokens_details") or {}
        usage = Usage(
            int(u.get("input_tokens") or 0),
            int(u.get("output_tokens") or 0),
            int(u.get("cache_read_input_tokens") or 0),
            int(u.get("cache_creation_input_tokens") or 0),
            int(details.get("thinking_tokens") or 0),
        )
        return ModelResponse(
            Message("assistant", blocks),
            self.stop_reason,
            usage,
            self.model,
            self.provider,
            tuple(incomplete),
            self.id,
        )


BEDROCK_VERSION = "bedrock-2023-05-31"
"""The ``anthropic_version`` Amazon Bedrock takes in the body (the SDK's default is the
first-party API's version)."""


def _is_bedrock(client: object) -> bool:
    return any(cls.__name__ == "AsyncAnthropicBedrock" for cls in type(client).__mro__)


def _sdk_client(**options: Any) -> anthropic.AsyncAnthropic:
    import anthropic  # seconds of import: only when a provider is built

    client = anthropic.AsyncAnthropic(**options)
    if not client.api_key and not client.auth_token and client.credentials is None:
        # the SDK would build it and fail every request: fail here, once, saying how
        raise missing_key(AnthropicProvider, "ANTHROPIC_API_KEY")
    return client


class AnthropicProvider(HTTPProvider):
    """Claude over the Messages API. ``api_key`` defaults to ``ANTHROPIC_API_KEY`` (or the
    SDK's other credentials: ``ANTHROPIC_AUTH_TOKEN``, a profile); with none of them,
    construction raises ``ValueError``.

    With ``transport=AsyncioTransport()`` the provider writes each request itself on that
    transport (the SDK client still supplies base URL, headers and credentials), which
    skips the SDK's per-request builder and connection pool: the route for many loops in
    one process. Any other httpx transport goes to the SDK client as its transport.

    ``max_event_bytes`` (16 MiB) bounds one streamed event, and a non-streaming body: a
    longer one is a malformed response (transient: retried once), not unbounded memory.

    ``client`` may be a prebuilt ``AsyncAnthropicVertex`` or ``AsyncAnthropicBedrock``
    (the SDK rewrites each request for the cloud: no ``transport``, then). On Bedrock the
    body carries ``anthropic_version: bedrock-2023-05-31`` and the answer arrives in AWS
    event-stream framing, read with botocore (``pip install 'innerloop[bedrock]'``)."""

    dialect = "anthropic"

    def __init__(
        self,
        api_key: str | None = None,
        *,
        base_url: str | None = None,
        name: str = "anthropic",
        timeout: float = 600.0,
        default_headers: dict[str, str] | None = None,
        client: anthropic.AsyncAnthropic
        | anthropic.AsyncAnthropicVertex
        | anthropic.AsyncAnthropicBedrock
        | None = None,
        transport: httpx2.AsyncBaseTransport | None = None,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    ) -> None:
        self.name = name
        self._extra: dict[str, Any] = {}
        if _is_bedrock(client):
            botocore_eventstream()  # now, with the fix in its error, not at the first answer
            self.splitter = EventStreamSplitter
            self._extra = {"extra_body": {"anthropic_version": BEDROCK_VERSION}}
        self._connect(
            _sdk_client,
            client,
            transport,
            "v1/messages",
            max_event_bytes,
            api_key=api_key,
            base_url=base_url,
            timeout=timeout,
            headers=default_headers,
        )

    def _send(self, payload: dict[str, Any]) -> AbstractAsyncContextManager[Any]:
        create = self.client.messages.with_streaming_response.create
        return create(**payload, **self._extra)  # type: ignore[no-any-return]

    def _assembler(self, request: WireRequest) -> AnthropicAssembler:
        return AnthropicAssembler(self.name, request.model, request.max_json_depth)
