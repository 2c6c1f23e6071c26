"""The OpenAI Responses API through ``AsyncOpenAI.responses`` (max_retries=0: the machine
retries), OpenAI's API for reasoning models.

Requests are stateless (``store: false``): each reasoning item comes back with its
``encrypted_content`` and is kept in the canonical history as a ``ThinkingBlock`` (its
summary as the text; its id and encrypted content in the signature, under
``RESPONSES_SIGNATURE``), which only this dialect sends back. Function calls are tool uses
keyed by their ``call_id``. The built-in tools' items (``web_search_call``,
``file_search_call``, ``code_interpreter_call``) are run by OpenAI: each is kept verbatim as
a ``ServerToolBlock`` (sent back to this API only) and reported as a ``server_tool`` event.
Usage: ``input_tokens`` excludes the tokens read from cache (``cache_read_tokens``) and
written to it (``cache_creation_tokens``); ``reasoning_tokens`` comes from
``output_tokens_details``.
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
    ServerToolBlock,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
    Usage,
)
from innerloop.providers._cache import openai_usage
from innerloop.providers._errors import error_from_body
from innerloop.providers._http import (
    DEFAULT_MAX_EVENT_BYTES,
    HTTPProvider,
    loads,
    malformed,
    parse_tool_input,
)
from innerloop.providers._normalize import RESPONSES_SIGNATURE, WireRequest
from innerloop.providers._openai import openai_key, sdk_client
from innerloop.providers._servertools import RESPONSES_SERVER_ITEMS

__all__ = ["OpenAIResponsesProvider", "ResponsesAssembler"]

if TYPE_CHECKING:  # the SDK is imported when a provider is built: it takes seconds
    import openai

_INCOMPLETE = {"max_output_tokens": "max_tokens", "content_filter": "refusal"}


class _Item:
    """An output item being streamed (message, function call or reasoning)."""

    __slots__ = ("call_id", "index", "kind", "name", "parts")

    def __init__(self, kind: str, index: int, call_id: str = "", name: str = "") -> None:
        self.kind = kind
        self.index = index
        self.call_id = call_id
        self.name = name
        self.parts: list[str] = []


def _error_of(event: dict[str, Any]) -> Any:
    """The error an ``error`` event carries: nested under ``error`` (``{"type": "error",
    "error": {"type": "insufficient_quota", "code": ..., "message": ...}}``), or flat
    beside the event's own ``type`` (``{"type": "error", "code": ..., "message": ...}``)."""
    nested = event.get("error")
    if isinstance(nested, dict):
        return nested
    return {k: v for k, v in event.items() if k not in ("type", "sequence_number")}


class ResponsesAssembler:
    """Responses stream events (as parsed JSON) -> stream events and a ``ModelResponse``."""

    def __init__(self, provider: str, model: str, max_depth: int = MAX_JSON_DEPTH) -> None:
        self.max_depth = max_depth
        self._envelope = wrapped_depth(max_depth)
        self.provider = provider
        self.model = model
        self.id: str | None = None
        self.started = False
        self.response: dict[str, Any] | None = None
        """The final ``response`` object (completed or incomplete)."""
        self.items: dict[int, _Item] = {}
        self.blocks: dict[int, Block] = {}
        self.refusal = False

    def feed(self, data: bytes, out: list[StreamEvent]) -> None:
        self.handle(loads(self.provider, data, self._envelope), out)

    def handle(self, event: dict[str, Any], out: list[StreamEvent]) -> None:
        kind = event.get("type")
        if kind == "error":
            raise error_from_body(self.provider, {"error": _error_of(event)}, raw=json.dumps(event))
        self.started = True
        handler = _HANDLERS.get(str(kind))
        if handler is not None:
            handler(self, event, out)

    # -- events ---------------------------------------------------------------------------

    def _created(self, event: dict[str, Any], out: list[StreamEvent]) -> None:
        response = event.get("response") or {}
        self.model = response.get("model") or self.model
        self.id = response.get("id") or self.id

    def _item_added(self, event: dict[str, Any], out: list[StreamEvent]) -> None:
        index, item = int(event["output_index"]), event["item"]
        kind = item.get("type", "")
        if kind == "function_call":
            if not item.get("name"):
                raise malformed(
                    self.provider, f"function call {index} names no function", json.dumps(item)
                )
            call_id = item.get("call_id") or item.get("id") or f"call_{index}"
            self.items[index] = _Item(kind, index, call_id, item["name"])
            out.append(ToolUseStart(index, call_id, item["name"]))
        else:
            self.items[index] = _Item(kind, index)

    def _item(self, event: dict[str, Any]) -> _Item:
        index = int(event["output_index"])
        item = self.items.get(index)
        if item is None:
            raise malformed(
                self.provider, f"a delta for output item {index}, never added", json.dumps(event)
            )
        return item

    def _delta(self, event: dict[str, Any]) -> tuple[_Item, str]:
        """The item a delta event extends, and its text (kept in the item when not empty)."""
        item = self._item(event)
        delta = event.get("delta") or ""
        if delta:
            item.parts.append(delta)
        return item, delta

    def _text_delta(self, event: dict[str, Any], out: list[StreamEvent]) -> None:
        if event.get("type") == "response.refusal.delta":
            self.refusal = True
        item, delta = self._delta(event)
        if delta:
            out.append(TextDelta(item.index, delta))

    def _reasoning_delta(self, event: dict[str, Any], out: list[StreamEvent]) -> None:
        item, delta = self._delta(event)
        if delta:
            out.append(ThinkingDelta(item.index, delta))

    def _arguments_delta(self, event: dict[str, Any], out: list[StreamEvent]) -> None:
        item, delta = self._delta(event)
        if delta:
            out.append(ToolInputDelta(item.index, item.call_id, delta))

    def _item_done(self, event: dict[str, Any], out: list[StreamEvent]) -> None:
        index, done = int(event["output_index"]), event["item"]
        item = self.items.get(index) or _Item(done.get("type", ""), index)
        kind = done.get("type", item.kind)
        if kind == "function_call":
            arguments = done.get("arguments")
            text = arguments if isinstance(arguments, str) else "".join(item.parts)
            name = done.get("name") or item.name
            call_id = done.get("call_id") or item.call_id
            block = ToolUseBlock(
                call_id, name, parse_tool_input(self.provider, name, text, self.max_depth)
            )
            self.blocks[index] = block
            out.append(ToolUseComplete(index, block))
        elif kind == "message":
            text = "".join(
                str(part.get("text") or part.get("refusal") or "")
                for part in done.get("content") or ()
            )
            self.blocks[index] = TextBlock(text or "".join(item.parts))
        elif kind == "reasoning":
            self.blocks[index] = _thinking(done, "".join(item.parts))
        elif kind in RESPONSES_SERVER_ITEMS:  # run by OpenAI: kept verbatim, sent back to it
            server = self.blocks[index] = ServerToolBlock("responses", done)
            out.append(ServerToolEvent(index, server))

    def _finished(self, event: dict[str, Any], out: list[StreamEvent]) -> None:
        self.response = event.get("response") or {}

    def _failed(self, event: dict[str, Any], out: list[StreamEvent]) -> None:
        response = event.get("response") or {}
        raise error_from_body(self.provider, {"error": response.get("error") or response})

    # -- the end --------------------------------------------------------------------------

    def feed_json(self, body: Any, out: list[StreamEvent]) -> None:
        """A non-streaming ``response`` object: its output items, then its end."""
        if not isinstance(body, dict) or body.get("object") != "response":
            raise error_from_body(self.provider, body or {"error": "empty response"})
        if body.get("error"):
            raise error_from_body(self.provider, body)
        self.started = True
        self._created({"response": body}, out)
        for index, item in enumerate(body.get("output") or ()):
            self._item_added({"output_index": index, "item": item}, out)
            self._item_done({"output_index": index, "item": item}, out)
        self.response = body

    def finish(self, out: list[StreamEvent]) -> ModelResponse:
        if not self.started:
            raise ProviderError(
                ErrorCategory.TRANSIENT, "empty response: no events", provider=self.provider
            )
        response = self.response
        if response is None:
            raise ProviderError(
                ErrorCategory.TRANSIENT,
                "the stream ended before the response did (no response.completed)",
                provider=self.provider,
            )
        status = response.get("status", "completed")
        reason = (response.get("incomplete_details") or {}).get("reason")
        incomplete = tuple(
            i.call_id
            for i in self.items.values()
            if i.kind == "function_call" and i.index not in self.blocks
        )
        if status == "incomplete":
            stop = _INCOMPLETE.get(str(reason), str(reason or "max_tokens"))
        elif incomplete:
            raise ProviderError(
                ErrorCategory.TRANSIENT,
                f"the response completed with unfinished function calls {incomplete}",
                provider=self.provider,
            )
        elif any(isinstance(b, ToolUseBlock) for b in self.blocks.values()):
            stop = "tool_use"
        else:
            stop = "end_turn"
        if self.refusal:
            stop = "refusal"
        blocks = tuple(self.blocks[i] for i in sorted(self.blocks))
        return ModelResponse(
            Message("assistant", blocks),
            stop,
            _usage(response.get("usage") or {}),
            response.get("model") or self.model,
            self.provider,
            incomplete,
            response.get("id") or self.id,
        )


def _thinking(item: dict[str, Any], streamed: str) -> ThinkingBlock:
    summary = "\n\n".join(
        str(part.get("text") or "") for part in item.get("summary") or () if part.get("text")
    )
    kept = {"id": item.get("id", ""), "encrypted_content": item.get("encrypted_content")}
    signature = RESPONSES_SIGNATURE + json.dumps(kept, separators=(",", ":"))
    return ThinkingBlock(summary or streamed, signature)


def _usage(u: dict[str, Any]) -> Usage:
    return openai_usage(
        u.get("input_tokens"),
        u.get("input_tokens_details"),
        u.get("output_tokens"),
        (u.get("output_tokens_details") or {}).get("reasoning_tokens"),
    )


_HANDLERS = {
    "response.created": ResponsesAssembler._created,
    "response.output_item.added": ResponsesAssembler._item_added,
    "response.output_text.delta": ResponsesAssembler._text_delta,
    "response.refusal.delta": ResponsesAssembler._text_delta,
    "response.reasoning_summary_text.delta": ResponsesAssembler._reasoning_delta,
    "response.function_call_arguments.delta": ResponsesAssembler._arguments_delta,
    "response.output_item.done": ResponsesAssembler._item_done,
    "response.completed": ResponsesAssembler._finished,
    "response.incomplete": ResponsesAssembler._finished,
    "response.failed": ResponsesAssembler._failed,
}


class OpenAIResponsesProvider(HTTPProvider):
    """The Responses API (``POST /responses``). ``api_key`` defaults to ``OPENAI_API_KEY``;
    with a ``base_url`` no key is needed; with neither, construction raises ``ValueError``.
    ``client`` takes a prebuilt ``AsyncOpenAI`` (or ``AsyncAzureOpenAI``);
    ``transport=AsyncioTransport()`` writes each request on innerloop's transport, as
    :class:`OpenAIProvider` does."""

    dialect = "responses"

    def __init__(
        self,
        api_key: str | None = None,
        *,
        base_url: str | None = None,
        name: str = "openai",
        timeout: float = 600.0,
        default_headers: dict[str, str] | None = None,
        client: openai.AsyncOpenAI | None = None,
        transport: httpx2.AsyncBaseTransport | None = None,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    ) -> None:
        self.name = name
        api_key = openai_key(
            api_key,
            client,
            base_url,
            OpenAIResponsesProvider,
            " (a local server with the Responses API needs none: give its base_url=)",
        )
        self._connect(
            sdk_client,
            client,
            transport,
            "responses",
            max_event_bytes,
            api_key=api_key,
            base_url=base_url,
            timeout=timeout,
            headers=default_headers,
        )

    def _send(self, payload: dict[str, Any]) -> AbstractAsyncContextManager[Any]:
        return self.client.responses.with_streaming_response.create(**payload)  # type: ignore[no-any-return]

    def _assembler(self, request: WireRequest) -> ResponsesAssembler:
        return ResponsesAssembler(self.name, request.model, request.max_json_depth)
