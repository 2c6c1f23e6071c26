"""Canonical, provider-neutral messages.

A history is a sequence of :class:`Message`, alternating ``user`` / ``assistant`` and
starting with ``user``. Tool results live in user messages as :class:`ToolResultBlock`
keyed by the ``tool_use_id`` of the assistant's :class:`ToolUseBlock`. ``normalize`` (in
``innerloop.providers``) turns a history into either provider's wire format.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Any, Literal, TypeAlias

import attrs

from innerloop import _convert

__all__ = [
    "STOP_REASONS",
    "Block",
    "ImageBlock",
    "Message",
    "ModelResponse",
    "RedactedThinkingBlock",
    "Role",
    "ServerToolBlock",
    "StopReason",
    "TextBlock",
    "ThinkingBlock",
    "ToolResultBlock",
    "ToolUseBlock",
    "Usage",
    "block_from_dict",
    "message_from_dict",
]

Role: TypeAlias = Literal["user", "assistant"]


def _unstructure(obj: Any) -> dict[str, Any]:
    """``obj`` in the package's one JSON form (see ``innerloop._convert``)."""
    data: dict[str, Any] = _convert.unstructure(obj)
    return data


def _frozen_mapping(value: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise TypeError(f"tool input must be a JSON object (a mapping), got {type(value).__name__}")
    return dict(value)


@attrs.frozen
class TextBlock:
    text: str
    type: Literal["text"] = attrs.field(default="text", init=False)

    def to_dict(self) -> dict[str, Any]:
        return _unstructure(self)


@attrs.frozen
class ThinkingBlock:
    """Extended thinking, kept verbatim with its signature (Anthropic verifies it)."""

    thinking: str
    signature: str = ""
    type: Literal["thinking"] = attrs.field(default="thinking", init=False)

    def to_dict(self) -> dict[str, Any]:
        return _unstructure(self)


@attrs.frozen
class RedactedThinkingBlock:
    data: str
    type: Literal["redacted_thinking"] = attrs.field(default="redacted_thinking", init=False)

    def to_dict(self) -> dict[str, Any]:
        return _unstructure(self)


@attrs.frozen
class ImageBlock:
    """An image as base64 data."""

    media_type: str
    data: str
    type: Literal["image"] = attrs.field(default="image", init=False)

    def to_dict(self) -> dict[str, Any]:
        return _unstructure(self)


@attrs.frozen(eq=False)
class ToolUseBlock:
    """A tool call made by the model. ``input`` is the parsed JSON object."""

    id: str
    name: str
    input: dict[str, Any] = attrs.field(factory=dict, converter=_frozen_mapping)
    type: Literal["tool_use"] = attrs.field(default="tool_use", init=False)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ToolUseBlock):
            return NotImplemented
        return (self.id, self.name, self.input) == (other.id, other.name, other.input)

    def __hash__(self) -> int:
        return hash((self.id, self.name))

    def to_dict(self) -> dict[str, Any]:
        return _unstructure(self)


@attrs.frozen
class ToolResultBlock:
    tool_use_id: str
    content: str
    is_error: bool = False
    type: Literal["tool_result"] = attrs.field(default="tool_result", init=False)

    def to_dict(self) -> dict[str, Any]:
        return _unstructure(self)


@attrs.frozen(eq=False)
class ServerToolBlock:
    """A call or a result of a tool the provider runs itself (Anthropic's web search, web
    fetch and code execution; the Responses API's web search, file search and code
    interpreter), kept verbatim: ``data`` is the content block (Anthropic) or output item
    (Responses) as the API sent it, and ``dialect`` the API that made it. It is sent back
    to that API only; normalizing for another one leaves it out (the fallback phase says
    so with an ``alert``). The harness never runs it."""

    dialect: str
    data: dict[str, Any] = attrs.field(converter=_frozen_mapping)
    type: Literal["server_tool"] = attrs.field(default="server_tool", init=False)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ServerToolBlock):
            return NotImplemented
        return (self.dialect, self.data) == (other.dialect, other.data)

    def __hash__(self) -> int:
        return hash((self.dialect, self.id))

    @property
    def kind(self) -> str:
        """The block's or item's own type (``server_tool_use``, ``web_search_tool_result``,
        ``web_search_call``, ...)."""
        return str(self.data.get("type", ""))

    @property
    def id(self) -> str:
        """The call's id (a result block carries the id of the call it answers)."""
        return str(self.data.get("id") or self.data.get("tool_use_id") or "")

    @property
    def is_result(self) -> bool:
        """An Anthropic result block (the Responses API keeps call and result in one item)."""
        return self.kind.endswith("_tool_result")

    @property
    def name(self) -> str:
        """The server tool's name: ``web_search``, ``code_execution``, ``file_search``..."""
        kind = self.kind
        if "name" in self.data and not self.is_result:
            return str(self.data["name"])
        for suffix in ("_tool_result", "_call"):
            if kind.endswith(suffix):
                return kind[: -len(suffix)]
        return kind

    def to_dict(self) -> dict[str, Any]:
        return _unstructure(self)


Block: TypeAlias = (
    TextBlock
    | ThinkingBlock
    | RedactedThinkingBlock
    | ImageBlock
    | ToolUseBlock
    | ToolResultBlock
    | ServerToolBlock
)


def _blocks(value: Iterable[Block] | str) -> tuple[Block, ...]:
    if isinstance(value, str):
        return (TextBlock(value),)
    return tuple(value)


@attrs.frozen
class Message:
    role: Role = attrs.field(validator=attrs.validators.in_(("user", "assistant")))
    content: tuple[Block, ...] = attrs.field(converter=_blocks)

    @classmethod
    def user(cls, content: Iterable[Block] | str) -> Message:
        return cls("user", content)

    @classmethod
    def assistant(cls, content: Iterable[Block] | str) -> Message:
        return cls("assistant", content)

    @property
    def text(self) -> str:
        return "".join(b.text for b in self.content if isinstance(b, TextBlock))

    @functools.cached_property
    def tool_uses(self) -> tuple[ToolUseBlock, ...]:
        """The tool calls among the content, in order (made once per message)."""
        return tuple(b for b in self.content if isinstance(b, ToolUseBlock))

    @property
    def tool_results(self) -> tuple[ToolResultBlock, ...]:
        return tuple(b for b in self.content if isinstance(b, ToolResultBlock))

    @property
    def server_tools(self) -> tuple[ServerToolBlock, ...]:
        """The server-side tool calls and results among the content, in order."""
        return tuple(b for b in self.content if isinstance(b, ServerToolBlock))

    def to_dict(self) -> dict[str, Any]:
        return _unstructure(self)


def block_from_dict(data: Mapping[str, Any]) -> Block:
    """A content block from its JSON form (``block.to_dict()``)."""
    return _convert.structure(data, Block)  # type: ignore[no-any-return]


def message_from_dict(data: Mapping[str, Any]) -> Message:
    """A message from its JSON form (``message.to_dict()``)."""
    return _convert.structure(data, Message)


@attrs.frozen
class Usage:
    """Token counts of one response, or a running total (``+`` adds them)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0
    thinking_tokens: int = 0
    """Part of ``output_tokens`` spent on thinking; billed as output, never at a discount."""

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_creation_tokens + other.cache_creation_tokens,
            self.thinking_tokens + other.thinking_tokens,
        )

    @property
    def total_tokens(self) -> int:
        return (
            self.input_tokens
            + self.output_tokens
            + self.cache_read_tokens
            + self.cache_creation_tokens
        )

    def to_dict(self) -> dict[str, int]:
        return _unstructure(self)


StopReason: TypeAlias = Literal[
    "end_turn", "tool_use", "max_tokens", "stop_sequence", "pause_turn", "refusal"
]
STOP_REASONS: tuple[str, ...] = (
    "end_turn",
    "tool_use",
    "max_tokens",
    "stop_sequence",
    "pause_turn",
    "refusal",
)


@attrs.frozen
class ModelResponse:
    """One assembled model turn.

    ``message`` holds only complete blocks: a tool call whose input was cut off (at
    max_tokens, or by a dropped stream) is listed in ``incomplete_tool_uses`` instead and
    is never executed.
    """

    message: Message
    stop_reason: str
    usage: Usage = Usage()
    model: str = ""
    """The model id the provider reports (resolved from an alias where it was one)."""
    provider: str = ""
    incomplete_tool_uses: tuple[str, ...] = ()
    id: str | None = None
    """The provider's id of this response (Anthropic ``msg_...``, Chat Completions
    ``chatcmpl-...``, Responses ``resp_...``); None when it sent none (and in logs written
    before it was kept)."""

    @property
    def tool_uses(self) -> tuple[ToolUseBlock, ...]:
        return self.message.tool_uses

    def to_dict(self) -> dict[str, Any]:
        return _unstructure(self)
