"""OpenAI Chat Completions (and compatible servers: vLLM, llama.cpp, Ollama) through
``AsyncOpenAI`` (max_retries=0: the machine retries).

Only choice 0 is assembled. ``usage.input_tokens`` excludes the prompt tokens read from
cache (``cache_read_tokens``) and written to it (``cache_creation_tokens``), as Anthropic
reports them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, Literal

import httpx2

from innerloop._errors import ErrorCategory, ProviderError
from innerloop._events import (
    Alert,
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
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
)
from innerloop.providers._cache import openai_usage
from innerloop.providers._errors import error_from_body
from innerloop.providers._http import (
    DEFAULT_MAX_EVENT_BYTES,
    HTTPModelStream,
    HTTPProvider,
    Posted,
    loads,
    malformed,
    missing_key,
    parse_tool_input,
    stream_failure,
)
from innerloop.providers._normalize import WireRequest, json_object_output

__all__ = ["FINISH_REASONS", "OUTPUT_CAP_FIELDS", "OpenAIAssembler", "OpenAIProvider"]

FINISH_REASONS = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}
_DONE = b"[DONE]"

if TYPE_CHECKING:  # the SDK is imported when a provider is built: it takes seconds
    import openai


class _Call:
    __slots__ = ("arguments", "done", "id", "index", "name")

    def __init__(self, index: int, id: str, name: str) -> None:
        self.index = index
        self.id = id
        self.name = name
        self.arguments: list[str] = []
        self.done = False


class OpenAIAssembler:
    """Chat completion chunks (as parsed JSON) -> stream events and a ``ModelResponse``."""

    def __init__(self, provider: str, model: str, max_depth: int = MAX_JSON_DEPTH) -> None:
        self.max_depth = max_depth
        self._envelope = wrapped_depth(max_depth)
        self.provider = provider
        self.model = model
        self.started = False
        self.finish_reason: str | None = None
        self.id: str | None = None
        self.usage: dict[str, Any] | None = None
        self.next_index = 0
        self.text_index: int | None = None
        self.thinking_index: int | None = None
        self.text: list[str] = []
        self.thinking: list[str] = []
        self.refusal = False
        self.calls: dict[int, _Call] = {}
        self.blocks: dict[int, Block] = {}

    def feed(self, data: bytes, out: list[StreamEvent]) -> None:
        if data.strip() == _DONE:
            return
        self.handle(loads(self.provider, data, self._envelope), out)

    def handle(self, chunk: dict[str, Any], out: list[StreamEvent]) -> None:
        if chunk.get("error"):
            raise error_from_body(self.provider, chunk)
        self.started = True
        if self.id is None:
            self.id = chunk.get("id")  # the same on every chunk of a completion
        if chunk.get("model"):
            self.model = chunk["model"]
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or choice.get("message") or {}
            if delta:
                self._delta(delta, out)
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]

    def _block_index(self) -> int:
        index, self.next_index = self.next_index, self.next_index + 1
        return index

    def _delta(self, delta: dict[str, Any], out: list[StreamEvent]) -> None:
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if reasoning and isinstance(reasoning, str):
            if self.thinking_index is None:
                self.thinking_index = self._block_index()
            self.thinking.append(reasoning)
            out.append(ThinkingDelta(self.thinking_index, reasoning))
        text = delta.get("content") or delta.get("refusal")
        if text:
            if delta.get("refusal"):
                self.refusal = True
            if self.text_index is None:
                self.text_index = self._block_index()
            self.text.append(text)
            out.append(TextDelta(self.text_index, text))
        for fragment in delta.get("tool_calls") or ():
            self._tool_fragment(fragment, out)

    def _tool_fragment(self, fragment: dict[str, Any], out: list[StreamEvent]) -> None:
        key = fragment.get("index", len(self.calls))
        function = fragment.get("function") or {}
        call = self.calls.get(key)
        if call is None:
            if not function.get("name"):
                raise malformed(
                    self.provider,
                    f"a tool call delta (index {fragment.get('index', 'missing')}) names no "
                    "function and continues no call",
                    json.dumps(fragment),
                )
            for earlier in self.calls.values():
                self._try_complete(earlier, out)
            call = self.calls[key] = _Call(
                self._block_index(), fragment.get("id") or f"call_{key}", function.get("name", "")
            )
            out.append(ToolUseStart(call.index, call.id, call.name))
        arguments = function.get("arguments")
        if arguments:
            call.arguments.append(arguments)
            out.append(ToolInputDelta(call.index, call.id, arguments))

    def _try_complete(self, call: _Call, out: list[StreamEvent], strict: bool = False) -> bool:
        """Complete ``call`` when its arguments parse; ``strict`` when they are whole (the
        message ended, not cut off): then arguments that do not parse stand as an
        unreadable input, answered with an error result."""
        if call.done:
            return True
        try:
            arguments = parse_tool_input(
                self.provider, call.name, "".join(call.arguments), self.max_depth, whole=strict
            )
        except ProviderError:  # still arriving, or cut off
            return False
        call.done = True
        block = ToolUseBlock(call.id, call.name, arguments)
        self.blocks[call.index] = block
        out.append(ToolUseComplete(call.index, block))
        return True

    def feed_json(self, body: Any, out: list[StreamEvent]) -> None:
        """A non-streaming ``chat.completion``: one chunk holding everything."""
        if not isinstance(body, dict) or "choices" not in body:
            raise error_from_body(self.provider, body or {"error": "empty response"})
        self.handle(body, out)

    def finish(self, out: list[StreamEvent]) -> ModelResponse:
        if not self.started:
            raise ProviderError(
                ErrorCategory.TRANSIENT, "empty response: no chunks", provider=self.provider
            )
        if self.finish_reason is None:
            raise ProviderError(
                ErrorCategory.TRANSIENT,
                "the stream ended before the message did (no finish_reason)",
                provider=self.provider,
            )
        cut = self.finish_reason == "length"
        incomplete = tuple(
            c.id for c in self.calls.values() if not self._try_complete(c, out, strict=not cut)
        )
        if self.thinking_index is not None:
            self.blocks[self.thinking_index] = ThinkingBlock("".join(self.thinking))
        if self.text_index is not None:
            self.blocks[self.text_index] = TextBlock("".join(self.text))
        stop = FINISH_REASONS.get(self.finish_reason, self.finish_reason)
        if self.refusal:
            stop = "refusal"
        u = self.usage or {}
        usage = openai_usage(
            u.get("prompt_tokens"),
            u.get("prompt_tokens_details"),
            u.get("completion_tokens"),
            (u.get("completion_tokens_details") or {}).get("reasoning_tokens"),
        )
        blocks = tuple(self.blocks[i] for i in sorted(self.blocks))
        return ModelResponse(
            Message("assistant", blocks),
            stop,
            usage,
            self.model,
            self.provider,
            incomplete,
            self.id,
        )


def sdk_client(**options: Any) -> openai.AsyncOpenAI:
    import openai  # seconds of import: only when a provider is built

    return openai.AsyncOpenAI(**options)


def openai_key(
    api_key: str | None, client: object, base_url: str | None, provider: type, hint: str
) -> str | None:
    """The key an OpenAI provider uses: the one given, else ``OPENAI_API_KEY``; none is
    needed with a prebuilt ``client`` or a ``base_url`` (a local server). Raises the
    missing-key error naming ``provider`` (with ``hint``) when there is none."""
    if api_key or client is not None:
        return api_key
    api_key = os.environ.get("OPENAI_API_KEY") or ("unused" if base_url else None)
    if not api_key:
        raise missing_key(provider, "OPENAI_API_KEY", hint)
    return api_key


class OpenAIProvider(HTTPProvider):
    """Chat Completions. ``api_key`` defaults to ``OPENAI_API_KEY``; with a ``base_url``
    (a local OpenAI-compatible server) no key is needed; with neither, construction raises
    ``ValueError``.

    With ``transport=AsyncioTransport()`` the provider writes each request itself on that
    transport (the SDK client still supplies base URL, headers and credentials), which
    skips the SDK's per-request builder and connection pool: the route for many loops in
    one process. Any other httpx transport goes to the SDK client as its transport.

    ``max_event_bytes`` (16 MiB) bounds one streamed event, and a non-streaming body: a
    longer one is a malformed response (transient: retried once), not unbounded memory.

    Compatible servers (llama.cpp, vLLM, Ollama, LM Studio, gateways) differ from
    OpenAI's own endpoint in a few ways, each handled here:

    - ``output_cap_field``: the field that carries ``max_output_tokens``. OpenAI's endpoint
      reads ``max_completion_tokens`` (and refuses ``max_tokens`` for reasoning models);
      compatible servers read ``max_tokens``. None (the default) decides by the base URL:
      ``max_completion_tokens`` for OpenAI's and Azure's hosts, ``max_tokens`` for any
      other.
    - ``unstreamed``: models asked without streaming (one JSON answer per turn). A server
      that answers a streamed request with an empty body (llama.cpp's, for tools with
      ``tool_choice="auto"`` or a prompt past its context) is asked once more without
      streaming: its real answer, or its real error (a context overflow is then a proper
      400), is what the machine sees. When that answer came, the provider remembers that
      this model cannot stream such requests (with tools, or without) and asks it so
      directly from then on; either way an ``Alert("stream_unsupported")`` says so.
    - A ``json_schema`` response format the server refuses (llama.cpp's 500: ``Input
      should be 'text' or 'json_object'``) is asked again as ``json_object`` with the
      schema in the system prompt (``output_mode="json"``'s form), remembered per model,
      with an ``Alert("output_format_fallback")``."""

    dialect = "openai"

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
        output_cap_field: Literal["max_completion_tokens", "max_tokens"] | None = None,
        unstreamed: Iterable[str] = (),
    ) -> None:
        self.name = name
        if output_cap_field not in (None, *OUTPUT_CAP_FIELDS):
            raise ValueError(
                f"output_cap_field must be one of {', '.join(OUTPUT_CAP_FIELDS)} or None "
                f"(decided by the base URL), got {output_cap_field!r}"
            )
        if isinstance(unstreamed, str):
            raise TypeError(f"unstreamed takes model ids, got one string: use ({unstreamed!r},)")
        self.unstreamed = frozenset(unstreamed)
        self._unstreamable: set[tuple[str, bool]] = set()
        self._json_object: set[str] = set()
        api_key = openai_key(
            api_key,
            client,
            base_url,
            OpenAIProvider,
            " (a local OpenAI-compatible server needs none: give its base_url=)",
        )
        self._connect(
            sdk_client,
            client,
            transport,
            "chat/completions",
            max_event_bytes,
            api_key=api_key,
            base_url=base_url,
            timeout=timeout,
            headers=default_headers,
        )

        if output_cap_field is None:
            host = self.client.base_url.host
            native = host == "api.openai.com" or host.endswith(".openai.azure.com")
            output_cap_field = "max_completion_tokens" if native else "max_tokens"
        self.output_cap_field = output_cap_field

    def _send(self, payload: dict[str, Any]) -> AbstractAsyncContextManager[Any]:
        return self.client.chat.completions.with_streaming_response.create(**payload)  # type: ignore[no-any-return]

    def _assembler(self, request: WireRequest) -> OpenAIAssembler:
        return OpenAIAssembler(self.name, request.model, request.max_json_depth)

    async def open(self, request: WireRequest) -> HTTPModelStream:
        """Send ``request`` as this endpoint reads it (see the class's notes); returns once
        the response status is known and, for a streamed one, its body has begun."""
        payload, model = self._wire_payload(request), request.model
        posted, payload, notices = await self._post_format(payload, model)
        if not payload.get("stream") or "json" in posted.content_type:
            return self._stream(request, posted, notices)
        try:
            empty = await posted.empty()
        except BaseException as exc:
            await posted.close()
            if not isinstance(exc, Exception):
                raise
            await self.drop_idle_connections()
            error = stream_failure(self.name, exc)
            if error is exc:
                raise
            raise error from exc
        if not empty:
            return self._stream(request, posted, notices)
        await posted.close()
        await self.drop_idle_connections()  # llama.cpp's closes it after an empty body
        return self._stream(request, await self._unstreamed_again(payload, model), notices)

    def _wire_payload(self, request: WireRequest) -> dict[str, Any]:
        """``request``'s payload as this endpoint reads it: the output cap's field, and
        what was learnt (a format it refuses, requests it cannot stream)."""
        payload, model = request.payload, request.model
        if self.output_cap_field != "max_completion_tokens" and "max_completion_tokens" in payload:
            payload = dict(payload)
            payload[self.output_cap_field] = payload.pop("max_completion_tokens")
        if model in self._json_object and _json_schema_asked(payload):
            payload = json_object_output(payload)
        kind = (model, bool(payload.get("tools")))
        if payload.get("stream") and (model in self.unstreamed or kind in self._unstreamable):
            payload = _unstreamed(payload)
        return payload

    async def _post_format(
        self, payload: dict[str, Any], model: str
    ) -> tuple[Posted, dict[str, Any], tuple[Alert, ...]]:
        """POST ``payload``; a ``json_schema`` format the server refuses is asked again as
        ``json_object`` (remembered for ``model``, and said in an alert). The response, the
        payload that got it, and the alerts."""
        try:
            return await self._post(payload), payload, ()
        except ProviderError as exc:
            if not (_json_schema_asked(payload) and _json_schema_refused(exc)):
                raise
            self._json_object.add(model)
            payload = json_object_output(payload)
            return await self._post(payload), payload, (_format_alert(model, exc),)

    async def _unstreamed_again(self, payload: dict[str, Any], model: str) -> Posted:
        """The streamed ``payload`` got an empty body: asked again without streaming, its
        real answer or its real error. An answer makes such requests to ``model`` go
        unstreamed from now on; an alert goes with it."""
        try:
            posted = await self._post(_unstreamed(payload))
        except ProviderError as exc:  # the real cause, said to come from the second ask
            raise exc.reworded(f"{exc.message} ({_ASKED_AGAIN})") from exc
        tools = bool(payload.get("tools"))
        if "json" in posted.content_type:
            self._unstreamable.add((model, tools))
        posted.notice = Alert(
            "stream_unsupported",
            f"{self.name} answered the streamed request for {model} "
            f"({'with' if tools else 'without'} tools) with an empty body; asked again "
            "without streaming, and requests of this kind to this model go unstreamed from "
            f"now on (OpenAIProvider(unstreamed=[{model!r}]) asks so from the start)",
        )
        return posted


OUTPUT_CAP_FIELDS = ("max_completion_tokens", "max_tokens")
_ASKED_AGAIN = "asked again without streaming: the streamed answer was an empty body"


def _unstreamed(payload: dict[str, Any]) -> dict[str, Any]:
    """``payload`` asking for one JSON answer instead of a stream."""
    return {**{k: v for k, v in payload.items() if k != "stream_options"}, "stream": False}


def _json_schema_asked(payload: dict[str, Any]) -> bool:
    fmt = payload.get("response_format")
    return isinstance(fmt, dict) and fmt.get("type") == "json_schema"


def _json_schema_refused(exc: ProviderError) -> bool:
    """Whether the server refused a ``json_schema`` response format (and would take
    ``json_object``)."""
    text = exc.message.lower()
    return exc.category is ErrorCategory.FATAL and "json_object" in text


def _format_alert(model: str, exc: ProviderError) -> Alert:
    return Alert(
        "output_format_fallback",
        f"{exc.provider} refused the json_schema response format for {model} "
        f"({exc.message[:200]}); asked for json_object with the schema in the system prompt, "
        "as output_mode='json' does, for this model from now on",
    )
