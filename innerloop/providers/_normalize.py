"""Canonical history -> provider wire format. Pure functions, no I/O.

Switching provider mid-run (fallback) is just normalizing the same canonical history for
the other dialect.
"""

from __future__ import annotations

import hashlib
import html
import json
import operator
import re
from collections.abc import Sequence
from typing import Any, Literal, TypeAlias

import attrs

from innerloop._errors import ContentError
from innerloop._history import History, Link, extends, unshared
from innerloop._json import MAX_JSON_DEPTH
from innerloop._messages import (
    Block,
    DocumentBlock,
    ImageBlock,
    Message,
    RedactedThinkingBlock,
    ServerToolBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from innerloop.providers._cache import (
    PromptCache,
    anthropic_cache_control,
    mark_messages,
    openai_cache_fields,
)
from innerloop.providers._reasoning import family_of
from innerloop.providers._servertools import ServerTool, server_tool_definition, server_tool_wire

__all__ = [
    "DIALECTS",
    "JSON_OBJECT_SYSTEM",
    "OUTPUT_MODES",
    "OUTPUT_TOOL",
    "RESPONSES_SIGNATURE",
    "Dialect",
    "RequestSettings",
    "WireRequest",
    "build_request",
    "check_sendable",
    "json_object_output",
    "native_output",
    "normalize",
    "output_tool_used",
    "with_output_tool",
]

Dialect: TypeAlias = Literal["anthropic", "openai", "responses"]
DIALECTS = ("anthropic", "openai", "responses")
RESPONSES_SIGNATURE = "openai-responses:"
"""The prefix of a ``ThinkingBlock.signature`` that holds a Responses API reasoning item
(its id and ``encrypted_content``, as JSON): sent back to the Responses API only."""
ERROR_PREFIX = "[tool error] "
_UNSAFE_ID = re.compile(r"[^A-Za-z0-9_-]")

OUTPUT_MODES = ("auto", "native", "tool", "json")
"""How a typed final answer is asked for: ``native`` structured output, the final-result
``tool``, ``json`` (Chat Completions' ``json_object`` format with the schema in the system
prompt, for compatible servers that refuse ``json_schema``; native for the other
dialects), or ``auto`` (native where the model has it, else the tool)."""
JSON_OBJECT_SYSTEM = (
    "Answer with one JSON object, and nothing else, that matches this JSON schema: {schema}"
)
"""The system line that names the schema of a ``json_object`` answer."""
OUTPUT_TOOL = "final_result"
"""The name of the final-result tool (reserved: no tool of the run may take it)."""
OUTPUT_TOOL_DESCRIPTION = (
    "Give the final answer of the task. Call this tool once, when you are done, with the "
    "answer as its input; it ends the conversation. Do not answer in plain text."
)
OUTPUT_TOOL_SYSTEM = (
    f"When you have the final answer, give it by calling the {OUTPUT_TOOL} tool (alone, "
    "not together with other tools), not as text."
)
_NO_NATIVE_OUTPUT = (
    "claude-3",
    "claude-sonnet-4-0",
    "claude-sonnet-4-2",
    "claude-opus-4-0",
    "claude-opus-4-2",
)
"""Model id prefixes of Claude models without native structured output (it came with
Claude Sonnet 4.5, Opus 4.1 and Haiku 4.5)."""


def native_output(model: str) -> bool:
    """Whether ``model`` takes its provider's native structured output (False only for
    the older Claude models)."""
    return not model.startswith(_NO_NATIVE_OUTPUT)


def output_tool_used(mode: str, model: str) -> bool:
    """Whether a request to ``model`` asks for the typed answer through the final-result
    tool (``mode`` is one of :data:`OUTPUT_MODES`)."""
    return mode == "tool" or (mode == "auto" and not native_output(model))


def _anthropic_id(tool_use_id: str) -> str:
    """Anthropic accepts tool ids of ``[A-Za-z0-9_-]`` only (other servers are laxer); a
    rewritten id gets a digest of the original so two ids never collide."""
    safe = _UNSAFE_ID.sub("_", tool_use_id)
    if safe == tool_use_id and safe:
        return safe
    return f"{safe}_{hashlib.sha256(tool_use_id.encode()).hexdigest()[:10]}"


@attrs.frozen
class WireRequest:
    """A request in one provider's wire format, ready to send (``payload`` is the JSON body)."""

    dialect: str
    model: str
    payload: dict[str, Any]
    time_limit: float | None = None
    """Seconds the whole call may take, from sending to the end of the stream."""
    max_json_depth: int = MAX_JSON_DEPTH
    """The deepest nesting of arrays and objects read from the answer (tool arguments;
    the events around them may nest a few levels more)."""


def _definitions(value: Sequence[Any]) -> tuple[dict[str, Any], ...]:
    return tuple(dict(d) for d in value)


def _strings(value: Sequence[str]) -> tuple[str, ...]:
    return tuple(value)


def _server_tools(value: Sequence[ServerTool]) -> tuple[ServerTool, ...]:
    return tuple(value)


@attrs.frozen
class RequestSettings:
    """What a request carries besides the history: the run's fixed settings.

    The machine makes one per run from its ``HarnessParams``
    (``innerloop.fsm.request_settings``); a provider never sees the params themselves.
    """

    max_output_tokens: int
    system: str = ""
    tools: tuple[dict[str, Any], ...] = attrs.field(default=(), converter=_definitions)
    """Provider-neutral tool definitions: name, description, input_schema; a definition
    may also carry ``strict_schema``, the form OpenAI's strict mode accepts (then sent
    with ``strict: true``)."""
    tool_choice: str = "auto"
    thinking_budget: int | None = None
    """Anthropic's extended thinking budget."""
    thinking_adaptive: bool = False
    """Anthropic's adaptive thinking, where the model takes it."""
    thinking_effort: str | None = None
    """OpenAI's reasoning effort (Anthropic's output effort where the model takes it)."""
    thinking_summary: str | None = None
    """The reasoning summaries the Responses API streams, when it reasons."""
    stop_sequences: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    temperature: float | None = None
    top_p: float | None = None
    cache_tools: bool = False
    """A cache breakpoint after the tools (as ``prompt_cache.tools``)."""
    cache_last_user_turn: bool = False
    """A cache breakpoint on the last message when it is the user's (as
    ``prompt_cache.last_messages=1``)."""
    prompt_cache: PromptCache = PromptCache()
    """Where Anthropic's cache breakpoints go and how long they live; OpenAI's
    ``prompt_cache_key`` and ``prompt_cache_retention``."""
    call_deadline: float | None = None
    """Seconds the whole call may take (carried on the request as ``time_limit``)."""
    max_json_depth: int = MAX_JSON_DEPTH
    """The deepest nesting read from the answer (carried on the request)."""
    output_schema: dict[str, Any] | None = None
    """The JSON schema the final answer must match, asked for in the dialect's native
    structured-output form (None: free text)."""
    output_strict_schema: dict[str, Any] | None = None
    """OpenAI's strict form of ``output_schema``, when it has one (then sent to OpenAI with
    ``strict: true``)."""
    output_name: str = "output"
    """The schema's name (OpenAI requires one)."""
    anthropic_output_schema: dict[str, Any] | None = None
    """``output_schema`` in the form Anthropic's structured output takes (see
    ``innerloop.fsm.OutputSpec.anthropic_schema``)."""
    output_mode: str = "auto"
    """How the answer is asked for (one of :data:`OUTPUT_MODES`): for a model that
    uses the final-result tool, ``build_request`` adds the tool (its input schema the output
    schema) and a line of system prompt instead of the native format."""
    server_tools: tuple[ServerTool, ...] = attrs.field(default=(), converter=_server_tools)
    """Tools the provider runs itself, each sent to the dialects that run it (see
    ``innerloop.providers._servertools``)."""


def normalize(messages: Sequence[Message], dialect: Dialect | str) -> list[dict[str, Any]]:
    """Turn a canonical history into ``dialect``'s ``messages`` list."""
    if dialect == "anthropic":
        return _anthropic_messages(messages)
    if dialect == "openai":
        return _openai_messages(messages)
    if dialect == "responses":
        return _responses_input(messages)
    raise ValueError(f"unknown dialect {dialect!r}; expected one of {', '.join(DIALECTS)}")


def check_sendable(messages: Sequence[Message], dialects: Sequence[str]) -> None:
    """Raise :class:`~innerloop.ContentError` for the first block of ``messages`` that one of
    ``dialects`` cannot take (a dialect outside :data:`DIALECTS`, such as a scripted
    provider's, takes anything)."""
    for dialect in dict.fromkeys(dialects):
        if dialect in DIALECTS:
            normalize(messages, dialect)


# -- Anthropic --------------------------------------------------------------------------------


def _anthropic_image(block: ImageBlock) -> dict[str, Any]:
    if block.url is not None:
        return {"type": "image", "source": {"type": "url", "url": block.url}}
    return {
        "type": "image",
        "source": {"type": "base64", "media_type": block.media_type, "data": block.data},
    }


def _anthropic_block(block: Block) -> dict[str, Any] | None:
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text} if block.text else None
    if isinstance(block, ThinkingBlock):
        if not block.signature or block.signature.startswith(RESPONSES_SIGNATURE):
            return None  # unsigned reasoning (or OpenAI's) would be rejected
        return {"type": "thinking", "thinking": block.thinking, "signature": block.signature}
    if isinstance(block, RedactedThinkingBlock):
        return {"type": "redacted_thinking", "data": block.data}
    if isinstance(block, ImageBlock):
        return _anthropic_image(block)
    if isinstance(block, DocumentBlock):
        return _anthropic_document(block)
    if isinstance(block, ServerToolBlock):
        return server_tool_wire(block, "anthropic")
    if isinstance(block, ToolUseBlock):
        return {
            "type": "tool_use",
            "id": _anthropic_id(block.id),
            "name": block.name,
            "input": dict(block.input),
        }
    out: dict[str, Any] = {
        "type": "tool_result",
        "tool_use_id": _anthropic_id(block.tool_use_id),
        "content": block.content,
    }
    if block.is_error:
        out["is_error"] = True
    return out


def _anthropic_document(block: DocumentBlock) -> dict[str, Any]:
    if block.url is not None:
        if block.media_type != "application/pdf":
            raise ContentError(
                "document",
                f"Anthropic fetches only PDFs by URL, and {block.url} is {block.media_type}; "
                "fetch it yourself and pass DocumentBlock.from_text(...)",
                "anthropic",
            )
        source: dict[str, Any] = {"type": "url", "url": block.url}
    elif block.media_type == "text/plain":
        source = {"type": "text", "media_type": "text/plain", "data": block.text}
    else:
        source = {"type": "base64", "media_type": block.media_type, "data": block.data}
    out: dict[str, Any] = {"type": "document", "source": source}
    if block.title is not None:
        out["title"] = block.title
    return out


class WireMessage(dict[str, Any]):
    """A wire message made from one canonical message, once, and kept with it (a long
    conversation converts each message once, not at every call). Never changed: what
    must differ (a cache breakpoint, a merge with its neighbour) is a copy. ``json``
    keeps its fingerprint's text once it is made, and ``prefix`` what hashing a list of
    wire messages that begins with it left (``innerloop.providers._fingerprint``)."""

    __slots__ = ("json", "prefix")

    def __init__(self, data: dict[str, Any]) -> None:
        super().__init__(data)
        self.json: bytes | None = None
        self.prefix: tuple[Any, ...] | None = None


def _results_first(role: str, content: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tool results open the user turn that answers the tool calls."""
    if role != "user" or not any(b["type"] == "tool_result" for b in content):
        return content
    results = [b for b in content if b["type"] == "tool_result"]
    return results + [b for b in content if b["type"] != "tool_result"]


def _anthropic_wire(message: Message) -> WireMessage | None:
    """``message`` on Anthropic's wire (None when it has no block to send), made once."""
    memo = message._memo
    if "anthropic" not in memo:
        blocks = [b for b in (_anthropic_block(b) for b in message.content) if b is not None]
        wire = {"role": message.role, "content": _results_first(message.role, blocks)}
        memo["anthropic"] = WireMessage(wire) if blocks else None
    wire_message: WireMessage | None = memo["anthropic"]
    return wire_message


_CHAINED_FROM = 256
"""A history this long or longer goes on by its chain of links; a shorter one by
comparing its messages with those kept (cheaper for a few messages)."""
_Kept: TypeAlias = tuple[Link[Message], "History[dict[str, Any]]", Link[dict[str, Any]] | None]
"""What a conversation's first message keeps of the last history converted: the link of
its last message, its wire messages (the list sent, when nothing was added to it) and
the link of their last one then."""


def _going_on(
    messages: Sequence[Message], key: str, lead: tuple[dict[str, Any], ...] = ()
) -> tuple[list[dict[str, Any]], Sequence[Message], Link[Message] | None]:
    """The wire messages kept under ``key`` for the longest start of ``messages`` made
    before, after the ``lead`` items (a system message), as a list to go on with (a copy,
    or the list itself when only the memo still holds it: the request that sent it is
    gone, so nobody sees it grow); the messages after that start; and the link of the
    last message.

    A conversation's first message keeps the last history converted, so a call converts
    only the messages added since. For a :class:`~innerloop._history.History` (as a run
    keeps it), it keeps the link of its last message, its wire messages and their link:
    a history whose chain goes on from that link goes on from them, known without
    comparing the messages before, and the list is a history of wire messages (its
    fingerprint goes on alike; below :data:`_CHAINED_FROM` messages, comparing costs
    less). The wire messages kept are the very list the last
    request sent (no copy of them is kept): they are taken while its chain still ends at
    the link kept, so while nothing changed it since (what adds to a request's messages,
    a cache breakpoint, adds to a copy). Another sequence is compared with the messages
    kept."""
    if not messages:
        return History(lead), messages, None
    memo = messages[0]._memo
    if type(messages) is not History or len(messages) < _CHAINED_FROM:
        done: tuple[list[Message], tuple[dict[str, Any], ...]] | None = memo.get(key + ".list")
        if done is not None:
            n = len(done[0])
            if n <= len(messages) and list(messages[:n]) == done[0] and _leads(done[1], lead):
                return list(done[1]), messages[n:], None
        return list(lead), messages, None
    head = messages.head()
    kept: _Kept | None = memo.get(key)
    if (
        kept is not None
        and kept[1].knows()
        and kept[1].head() is kept[2]
        and extends(head, kept[0])
        and _leads(kept[1], lead)
    ):
        rest = messages[kept[0].size :]
        if unshared(kept[1]):  # the last request is gone: its list goes on, not a copy
            return kept[1], rest, head
        return History.made(kept[1], kept[2]), rest, head
    return History(lead), messages, head


def _leads(items: Sequence[dict[str, Any]], lead: tuple[dict[str, Any], ...]) -> bool:
    """Whether ``items`` begin with the ``lead`` items themselves (none, or a system
    message)."""
    return not lead or (len(items) >= len(lead) and all(map(operator.is_, items, lead)))


def _keep(
    messages: Sequence[Message], key: str, head: Link[Message] | None, out: list[dict[str, Any]]
) -> None:
    """Keep ``out``, the wire messages of ``messages`` (ending at link ``head``), for the
    next call (see :func:`_going_on`)."""
    if not messages:
        return
    if type(out) is History:
        messages[0]._memo[key] = (head, out, out.head())
    else:
        messages[0]._memo[key + ".list"] = (list(messages), tuple(out))


def _anthropic_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The history on Anthropic's wire, going on from the last history converted (see
    :func:`_going_on`); consecutive messages of one role merged into one."""
    out, rest, head = _going_on(messages, "anthropic.history")
    for message in rest:
        wire = _anthropic_wire(message)
        if wire is None:
            continue
        role = message.role
        if out and out[-1]["role"] == role:  # a copy: the kept messages stay as they are
            content = _results_first(role, [*out[-1]["content"], *wire["content"]])
            out[-1] = {"role": role, "content": content}
        else:
            out.append(wire)
    _keep(messages, "anthropic.history", head, out)
    if out and out[0]["role"] != "user":  # a copy: the kept list stays as it is
        first = {"role": "user", "content": [{"type": "text", "text": "(continued)"}]}
        out = [first, *out]
    return out


# -- OpenAI -----------------------------------------------------------------------------------


def _data_url(block: ImageBlock | DocumentBlock) -> str:
    return block.url or f"data:{block.media_type};base64,{block.data}"


def _document_text(block: DocumentBlock) -> str:
    """A plain-text document as the text part it becomes on Chat Completions (which takes
    files as PDFs only): its text between ``<document>`` tags naming its title, both
    escaped as XML text (``&``, ``<``, ``>``; quotes in the title), so neither can close
    the frame or add to it."""
    name = block.title or block.filename
    head = f'<document title="{html.escape(name)}">' if name else "<document>"
    return f"{head}\n{html.escape(block.text, quote=False)}\n</document>"


def _openai_document(block: DocumentBlock) -> dict[str, Any]:
    if block.url is not None:
        raise ContentError(
            "document",
            f"Chat Completions takes no file by URL ({block.url}); pass the bytes with "
            "DocumentBlock.from_bytes(...), or send the run through "
            "OpenAIResponsesProvider (the Responses API), which fetches URLs",
            "openai",
        )
    if block.media_type == "text/plain":  # declared conversion: files are PDFs only here
        return {"type": "text", "text": _document_text(block)}
    return {"type": "file", "file": {"filename": block.name, "file_data": _data_url(block)}}


def _openai_user_part(block: Block) -> dict[str, Any] | None:
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text} if block.text else None
    if isinstance(block, ImageBlock):
        return {"type": "image_url", "image_url": {"url": _data_url(block)}}
    if isinstance(block, DocumentBlock):
        return _openai_document(block)
    return None


def _openai_wire(message: Message) -> tuple[WireMessage, ...]:
    """``message`` on Chat Completions' wire (tool results are messages of their own),
    made once."""
    memo = message._memo
    made: tuple[WireMessage, ...] | None = memo.get("openai")
    if made is not None:
        return made
    out: list[dict[str, Any]] = []
    if message.role == "assistant":
        text = "".join(b.text for b in message.content if isinstance(b, TextBlock))
        calls = [
            {
                "id": b.id,
                "type": "function",
                "function": {
                    "name": b.name,
                    "arguments": json.dumps(b.input, separators=(",", ":")),
                },
            }
            for b in message.content
            if isinstance(b, ToolUseBlock)
        ]
        if text or calls:  # thinking-only turns cannot be sent to OpenAI
            # a message of calls alone carries "" as content: OpenAI's schema takes any
            # string there; llama.cpp's server refuses null (a 500) and its chat templates
            # read the key (a 500 without it)
            wire: dict[str, Any] = {"role": "assistant", "content": text}
            if calls:
                wire["tool_calls"] = calls
            out.append(wire)
    else:
        for block in message.content:
            if isinstance(block, ToolResultBlock):
                content = ERROR_PREFIX + block.content if block.is_error else block.content
                out.append({"role": "tool", "tool_call_id": block.tool_use_id, "content": content})
        parts = [p for p in (_openai_user_part(b) for b in message.content) if p is not None]
        if parts and all(p["type"] == "text" for p in parts):
            out.append({"role": "user", "content": "\n\n".join(p["text"] for p in parts)})
        elif parts:
            out.append({"role": "user", "content": parts})
    made = memo["openai"] = tuple(WireMessage(w) for w in out)
    return made


def _openai_messages(messages: Sequence[Message], system: str = "") -> list[dict[str, Any]]:
    """The history on Chat Completions' wire, after the ``system`` message when there is
    one, going on from the last history converted (see :func:`_going_on`)."""
    lead: tuple[dict[str, Any], ...] = ()
    key = "openai.history"
    if system:  # one system message per conversation while it stays: kept with the rest
        memo = messages[0]._memo if messages else {}
        kept = memo.get("openai.system")
        if kept is None or kept["content"] != system:
            kept = memo["openai.system"] = WireMessage({"role": "system", "content": system})
        lead, key = (kept,), "openai.history+system"
    out, rest, head = _going_on(messages, key, lead)
    for message in rest:
        out += _openai_wire(message)
    _keep(messages, key, head, out)
    return out


# -- OpenAI Responses -------------------------------------------------------------------------


def _reasoning_item(block: ThinkingBlock) -> dict[str, Any] | None:
    """A Responses reasoning item kept in a thinking block; None for another dialect's."""
    if not block.signature.startswith(RESPONSES_SIGNATURE):
        return None
    kept = json.loads(block.signature[len(RESPONSES_SIGNATURE) :])
    summary = [{"type": "summary_text", "text": block.thinking}] if block.thinking else []
    item: dict[str, Any] = {"type": "reasoning", "id": kept["id"], "summary": summary}
    if kept.get("encrypted_content"):
        item["encrypted_content"] = kept["encrypted_content"]
    return item


def _responses_user_part(block: Block) -> dict[str, Any] | None:
    if isinstance(block, TextBlock):
        return {"type": "input_text", "text": block.text} if block.text else None
    if isinstance(block, ImageBlock):
        return {"type": "input_image", "image_url": _data_url(block), "detail": "auto"}
    if isinstance(block, DocumentBlock):
        if block.url is not None:
            part = {"type": "input_file", "file_url": block.url}
            if block.filename is not None:
                part["filename"] = block.filename
            return part
        return {"type": "input_file", "filename": block.name, "file_data": _data_url(block)}
    return None


def _responses_assistant(message: Message, out: list[dict[str, Any]]) -> None:
    """Reasoning, text and calls as input items, in the order the model made them."""
    for block in message.content:
        if isinstance(block, ThinkingBlock):
            item = _reasoning_item(block)
            if item is not None:
                out.append(item)
        elif isinstance(block, TextBlock) and block.text:
            out.append({"role": "assistant", "content": block.text})
        elif isinstance(block, ServerToolBlock):
            item = server_tool_wire(block, "responses")
            if item is not None:
                out.append(item)
        elif isinstance(block, ToolUseBlock):
            arguments = json.dumps(block.input, separators=(",", ":"))
            out.append(
                {
                    "type": "function_call",
                    "call_id": block.id,
                    "name": block.name,
                    "arguments": arguments,
                }
            )


def _responses_wire(message: Message) -> tuple[WireMessage, ...]:
    """``message`` as Responses input items, made once."""
    memo = message._memo
    made: tuple[WireMessage, ...] | None = memo.get("responses")
    if made is not None:
        return made
    out: list[dict[str, Any]] = []
    if message.role == "assistant":
        _responses_assistant(message, out)
    else:
        for block in message.content:
            if isinstance(block, ToolResultBlock):
                content = ERROR_PREFIX + block.content if block.is_error else block.content
                out.append(
                    {
                        "type": "function_call_output",
                        "call_id": block.tool_use_id,
                        "output": content,
                    }
                )
        parts = [p for p in (_responses_user_part(b) for b in message.content) if p is not None]
        if parts:
            out.append({"role": "user", "content": parts})
    made = memo["responses"] = tuple(WireMessage(w) for w in out)
    return made


def _responses_input(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The history as Responses input items, going on from the last history converted
    (see :func:`_going_on`)."""
    out, rest, head = _going_on(messages, "responses.history")
    for message in rest:
        out += _responses_wire(message)
    _keep(messages, "responses.history", head, out)
    return out


def _responses_tool(definition: dict[str, Any]) -> dict[str, Any]:
    tool = {
        "type": "function",
        "name": definition["name"],
        "description": definition["description"],
    }
    strict = definition.get("strict_schema")
    if strict is not None:
        tool.update(parameters=strict, strict=True)
    else:
        tool.update(parameters=definition["input_schema"], strict=False)
    return tool


def _responses_tool_choice(choice: str) -> Any:
    if choice.startswith("tool:"):
        return {"type": "function", "name": choice[len("tool:") :]}
    return {"any": "required"}.get(choice, choice)


def _responses_payload(settings: RequestSettings, history: Sequence[Message]) -> dict[str, Any]:
    """Stateless (``store: false``): reasoning items come back encrypted and are sent again
    with the history. The Responses API takes no stop sequences: they are not sent."""
    payload: dict[str, Any] = {
        "max_output_tokens": settings.max_output_tokens,
        "store": False,
        "include": ["reasoning.encrypted_content"],
    }
    if settings.system:
        payload["instructions"] = settings.system
    server = _server_definitions(settings, "responses")
    if settings.tools or server:
        payload["tools"] = [_responses_tool(t) for t in settings.tools] + server
        payload["tool_choice"] = _responses_tool_choice(settings.tool_choice)
    payload.update(openai_cache_fields(settings.prompt_cache))
    if any(t.name == "code_interpreter" for t in settings.server_tools):
        payload["include"].append("code_interpreter_call.outputs")
    payload["messages"] = _responses_input(history)
    return payload


def _server_definitions(settings: RequestSettings, dialect: str) -> list[dict[str, Any]]:
    """The definitions of the server tools ``dialect`` runs (the others are left out)."""
    found = (server_tool_definition(t, dialect) for t in settings.server_tools)
    return [d for d in found if d is not None]


# -- whole requests ---------------------------------------------------------------------------


def _anthropic_tool_choice(choice: str) -> dict[str, Any]:
    if choice.startswith("tool:"):
        return {"type": "tool", "name": choice[len("tool:") :]}
    return {"type": choice}


def _openai_tool(definition: dict[str, Any]) -> dict[str, Any]:
    function = {"name": definition["name"], "description": definition["description"]}
    strict = definition.get("strict_schema")
    if strict is not None:
        function.update(parameters=strict, strict=True)
    else:
        function["parameters"] = definition["input_schema"]
    return {"type": "function", "function": function}


def _openai_tool_choice(choice: str) -> Any:
    if choice.startswith("tool:"):
        return {"type": "function", "function": {"name": choice[len("tool:") :]}}
    return {"any": "required"}.get(choice, choice)


def _anthropic_payload(settings: RequestSettings, history: Sequence[Message]) -> dict[str, Any]:
    messages = _anthropic_messages(history)
    payload: dict[str, Any] = {"max_tokens": settings.max_output_tokens}
    cache = settings.prompt_cache
    if settings.system:
        system: dict[str, Any] = {"type": "text", "text": settings.system}
        if cache.system:
            system["cache_control"] = anthropic_cache_control(cache.ttl)
        payload["system"] = [system]
    server = _server_definitions(settings, "anthropic")
    if settings.tools or server:
        defs = [{k: v for k, v in t.items() if k != "strict_schema"} for t in settings.tools]
        defs += server
        if cache.tools or settings.cache_tools:
            defs[-1]["cache_control"] = anthropic_cache_control(cache.ttl)
        payload["tools"] = defs
        payload["tool_choice"] = _anthropic_tool_choice(settings.tool_choice)
    if settings.stop_sequences:
        payload["stop_sequences"] = list(settings.stop_sequences)
    last = cache.last_messages
    if not last and settings.cache_last_user_turn and messages and messages[-1]["role"] == "user":
        last = 1
    if last:  # a copy: the list converted is kept for the next call as it is
        if type(messages) is History:
            messages = History.made(messages, messages.head())
        mark_messages(messages, last, cache.messages_ttl)
    payload["messages"] = messages
    return payload


def _openai_payload(settings: RequestSettings, history: Sequence[Message]) -> dict[str, Any]:
    messages = _openai_messages(history, settings.system)
    payload: dict[str, Any] = {
        "max_completion_tokens": settings.max_output_tokens,
        "stream_options": {"include_usage": True},
    }
    if settings.tools:
        payload["tools"] = [_openai_tool(t) for t in settings.tools]
        payload["tool_choice"] = _openai_tool_choice(settings.tool_choice)
    if settings.stop_sequences:
        payload["stop"] = list(settings.stop_sequences)
    payload.update(openai_cache_fields(settings.prompt_cache))
    payload["messages"] = messages
    return payload


_PAYLOADS = {
    "anthropic": _anthropic_payload,
    "openai": _openai_payload,
    "responses": _responses_payload,
}


def build_request(
    settings: RequestSettings, history: Sequence[Message], dialect: Dialect | str, model: str
) -> WireRequest:
    """The full streaming request body for ``dialect``: system, tools, settings, messages."""
    make = _PAYLOADS.get(dialect)
    if make is None:
        raise ValueError(f"unknown dialect {dialect!r}; expected one of {', '.join(DIALECTS)}")
    payload: dict[str, Any] = {"model": model, "stream": True}
    typed = settings.output_schema is not None
    tool_mode = typed and output_tool_used(settings.output_mode, model)
    if tool_mode or (typed and _calls_output_tool(history)):
        settings = with_output_tool(settings, asked=tool_mode)
    body = make(settings, history)
    messages = body.pop("messages")
    payload.update(body)
    if settings.temperature is not None:
        payload["temperature"] = settings.temperature
    if settings.top_p is not None:
        payload["top_p"] = settings.top_p
    payload.update(_reasoning(settings, str(dialect), model))
    if settings.output_schema is not None and not tool_mode:
        _output_format(settings, str(dialect), payload)
    payload["input" if dialect == "responses" else "messages"] = messages
    if dialect == "openai" and settings.output_mode == "json" and "response_format" in payload:
        payload = json_object_output(payload)
    return WireRequest(
        str(dialect), model, payload, settings.call_deadline, settings.max_json_depth
    )


def _calls_output_tool(history: Sequence[Message]) -> bool:
    return any(u.name == OUTPUT_TOOL for m in history if m.role == "assistant" for u in m.tool_uses)


def with_output_tool(settings: RequestSettings, *, asked: bool = True) -> RequestSettings:
    """``settings`` with the final-result tool after the run's tools and, when ``asked``,
    the system line that asks for it. A model asked in its native format is still sent the
    tool when the history holds a call of it (from a model of the chain before it): a
    request whose history calls an undeclared tool is refused by Anthropic.

    ``tool_choice`` is left as it is (``auto``): forcing a tool call on every turn would
    make the model call ``final_result`` before it used the run's tools (or never let it use
    them); a model that ends in prose instead is repaired."""
    assert settings.output_schema is not None
    definition: dict[str, Any] = {
        "name": OUTPUT_TOOL,
        "description": OUTPUT_TOOL_DESCRIPTION,
        "input_schema": settings.output_schema,
    }
    if settings.output_strict_schema is not None:
        definition["strict_schema"] = settings.output_strict_schema
    system = settings.system
    if asked:
        system = f"{system}\n\n{OUTPUT_TOOL_SYSTEM}" if system else OUTPUT_TOOL_SYSTEM
    return attrs.evolve(settings, tools=(*settings.tools, definition), system=system)


def _output_format(settings: RequestSettings, dialect: str, payload: dict[str, Any]) -> None:
    """Ask for the final answer in ``settings.output_schema``, the dialect's native way."""
    if dialect == "anthropic":  # beside an effort level, when one is set
        config = payload.setdefault("output_config", {})
        config["format"] = {"type": "json_schema", "schema": settings.anthropic_output_schema}
        return
    strict = settings.output_strict_schema
    schema = strict if strict is not None else settings.output_schema
    named = {"name": settings.output_name, "schema": schema, "strict": strict is not None}
    if dialect == "openai":
        payload["response_format"] = {"type": "json_schema", "json_schema": named}
    else:
        payload["text"] = {"format": {"type": "json_schema", **named}}


def json_object_output(payload: dict[str, Any]) -> dict[str, Any]:
    """A Chat Completions ``payload`` that asks for a ``json_schema`` answer, asking for a
    ``json_object`` instead: the schema goes to the system prompt (a line of
    :data:`JSON_OBJECT_SYSTEM`) and beside the type as ``schema``, which llama.cpp's server
    turns into a grammar (others ignore it). The answer is validated as any typed answer."""
    schema = payload["response_format"]["json_schema"]["schema"]
    line = JSON_OBJECT_SYSTEM.format(schema=json.dumps(schema, separators=(",", ":")))
    messages = list(payload["messages"])
    first = messages[0] if messages else {}
    if first.get("role") == "system" and isinstance(first.get("content"), str):
        messages[0] = {**first, "content": f"{first['content']}\n\n{line}"}
    else:
        messages.insert(0, {"role": "system", "content": line})
    fmt = {"type": "json_object", "schema": schema}
    return {**payload, "response_format": fmt, "messages": messages}


def _reasoning(settings: RequestSettings, dialect: str, model: str) -> dict[str, Any]:
    """The reasoning fields of a request, as far as ``model``'s family takes them (all of
    them for a model of no known family)."""
    family = family_of(model)
    budget, adaptive, effort = (
        settings.thinking_budget,
        settings.thinking_adaptive,
        settings.thinking_effort,
    )
    if family is not None:
        budget = budget if family.budget else None
        adaptive = adaptive and family.adaptive
        effort = effort if effort in family.efforts else None
    out: dict[str, Any] = {}
    if dialect == "anthropic":
        if adaptive:
            out["thinking"] = {"type": "adaptive"}
        elif budget is not None:
            out["thinking"] = {"type": "enabled", "budget_tokens": budget}
        if effort is not None:
            out["output_config"] = {"effort": effort}
    elif dialect == "openai" and effort is not None:
        out["reasoning_effort"] = effort
    elif dialect == "responses" and effort is not None:
        reasoning = {"effort": effort}
        if settings.thinking_summary is not None:
            reasoning["summary"] = settings.thinking_summary
        out["reasoning"] = reasoning
    return out
