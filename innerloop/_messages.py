"""Canonical, provider-neutral messages.

A history is a sequence of :class:`Message`, alternating ``user`` / ``assistant`` and
starting with ``user``. Tool results live in user messages as :class:`ToolResultBlock`
keyed by the ``tool_use_id`` of the assistant's :class:`ToolUseBlock`. ``normalize`` (in
``innerloop.providers``) turns a history into either provider's wire format.
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
from collections.abc import Iterable, Mapping
from typing import Any, Literal, TypeAlias

import attrs

from innerloop import _convert
from innerloop._errors import ContentError

__all__ = [
    "DOCUMENT_TYPES",
    "IMAGE_TYPES",
    "STOP_REASONS",
    "Block",
    "DocumentBlock",
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
    "encodable",
    "encodable_json",
    "message_from_dict",
]

Role: TypeAlias = Literal["user", "assistant"]


def _unstructure(obj: Any) -> dict[str, Any]:
    """``obj`` in the package's one JSON form (see ``innerloop._convert``)."""
    data: dict[str, Any] = _convert.unstructure(obj)
    return data


def _unencodable(text: str) -> bool:
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def encodable(text: str) -> str:
    """``text`` as UTF-8 can encode it: each lone surrogate (bytes decoded with
    ``surrogateescape``, a ``"\\ud800"`` JSON escape) is written as its escape, the six
    characters ``\\udcff``; other text is returned as it is. Text enters a run's history
    through it, so it is hashed, logged, sent and shown the same way everywhere."""
    if _unencodable(text):
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def encodable_json(text: str) -> str:
    """JSON text (``json.dumps(..., ensure_ascii=False)``) as UTF-8 can encode it: each
    lone surrogate, which can only sit inside a string, becomes an escaped backslash and
    its escape, so the string reads back as :func:`encodable` writes that text (what a
    page shows is what the history holds)."""
    if _unencodable(text):
        return _SURROGATE.sub(lambda m: f"\\\\u{ord(m.group()):04x}", text)
    return text


_SURROGATE = re.compile("[\ud800-\udfff]")


def _frozen_mapping(value: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise TypeError(f"tool input must be a JSON object (a mapping), got {type(value).__name__}")
    return dict(value)


@attrs.frozen
class TextBlock:
    text: str = attrs.field(converter=encodable)
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


IMAGE_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")
"""The image media types every supported API takes."""
DOCUMENT_TYPES = ("application/pdf", "text/plain")
"""The document media types: PDF, and plain text (UTF-8)."""
_PDF_MAGIC = b"%PDF-"
"""The first bytes of every PDF."""


def _image_type(raw: bytes) -> str | None:
    """The image type ``raw`` starts as (by its magic bytes), among :data:`IMAGE_TYPES`."""
    if raw.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if raw.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if raw.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if raw.startswith(b"RIFF") and raw[8:12] == b"WEBP":
        return "image/webp"
    return None


def _check_image(raw: bytes, media_type: str) -> None:
    """``raw`` is an image of ``media_type``, by its magic bytes (as a PDF's are checked)."""
    found = _image_type(raw)
    if found == media_type:
        return
    if found is not None:
        raise ContentError("image", f"data is {found}, not {media_type}; pass media_type={found!r}")
    raise ContentError(
        "image",
        f"data is not {media_type} (its first bytes are {raw[:8]!r}, no image type the "
        "providers take); convert it to PNG, JPEG, GIF or WebP first",
    )


def _check_base64(block: str, data: str) -> bytes:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise ContentError(
            block,
            f"data is not base64 text (it starts {data[:16]!r}); pass the raw bytes to "
            f"{'ImageBlock' if block == 'image' else 'DocumentBlock'}.from_bytes(...), "
            "which encodes them",
        ) from None


def _check_url(block: str, url: str) -> None:
    if not url.startswith(("https://", "http://")):
        cls = "ImageBlock" if block == "image" else "DocumentBlock"
        raise ContentError(
            block,
            f"url must be an http(s) URL the provider can fetch, got {url[:60]!r}; for a local "
            f"file pass its bytes: {cls}.from_bytes(Path(...).read_bytes(), ...)",
        )


def _check_source(block: str, data: str, url: str | None) -> None:
    """Exactly one of ``data`` and ``url``."""
    cls = "ImageBlock" if block == "image" else "DocumentBlock"
    if data and url is not None:
        raise ContentError(
            block, f"give data or url, not both; drop one ({cls}.from_bytes or {cls}.from_url)"
        )
    if not data and url is None:
        raise ContentError(
            block,
            f"has no content: data is empty and there is no url; give the bytes with "
            f"{cls}.from_bytes(...) or a link with {cls}.from_url(...)",
        )
    if url is not None:
        _check_url(block, url)


@attrs.frozen
class ImageBlock:
    """An image: base64 ``data`` of ``media_type`` (one of :data:`IMAGE_TYPES`), or a
    ``url`` the provider fetches (then ``media_type`` may stay empty).

    ``ImageBlock.from_bytes(png, "image/png")`` and ``ImageBlock.from_url(url)`` make one;
    a bad one raises :class:`~innerloop.ContentError` here, naming the fix."""

    media_type: str = ""
    data: str = ""
    url: str | None = None
    type: Literal["image"] = attrs.field(default="image", init=False)

    def __attrs_post_init__(self) -> None:
        _check_source("image", self.data, self.url)
        if self.data and self.media_type not in IMAGE_TYPES:
            raise ContentError(
                "image",
                f"media type {self.media_type!r} is not one the providers take; use one of "
                f"{', '.join(IMAGE_TYPES)} (convert the image first), or a DocumentBlock "
                "for a PDF",
            )
        if self.data:
            _check_image(_check_base64("image", self.data), self.media_type)

    @classmethod
    def from_bytes(cls, data: bytes, media_type: str) -> ImageBlock:
        """An image from its raw bytes (base64-encoded here)."""
        return cls(media_type, base64.b64encode(data).decode("ascii"))

    @classmethod
    def from_url(cls, url: str, media_type: str = "") -> ImageBlock:
        """An image the provider fetches from ``url`` (http or https)."""
        return cls(media_type, "", url)

    def to_dict(self) -> dict[str, Any]:
        return _unstructure(self)


@attrs.frozen
class DocumentBlock:
    """A document for the model to read: a PDF or plain text, as base64 ``data`` or by
    ``url`` (which the provider fetches). ``title`` names it to the model; ``filename`` is
    the name OpenAI is told (default ``document.pdf`` / ``document.txt``).

    Make one with :meth:`from_bytes`, :meth:`from_text` or :meth:`from_url`; a bad one
    raises :class:`~innerloop.ContentError` here, naming the fix. Each provider takes it in
    its own form; where one cannot (a URL on Chat Completions, plain text by URL on
    Anthropic), building the request raises ContentError before anything is sent."""

    media_type: str = "application/pdf"
    data: str = ""
    url: str | None = None
    title: str | None = None
    filename: str | None = None
    type: Literal["document"] = attrs.field(default="document", init=False)

    def __attrs_post_init__(self) -> None:
        if self.media_type not in DOCUMENT_TYPES:
            hint = " (for an image, use ImageBlock)" if self.media_type in IMAGE_TYPES else ""
            raise ContentError(
                "document",
                f"media type {self.media_type!r} is not a document type; use "
                f"{' or '.join(DOCUMENT_TYPES)}{hint}",
            )
        _check_source("document", self.data, self.url)
        if not self.data:
            return
        raw = _check_base64("document", self.data)
        if self.media_type == "application/pdf" and not raw.startswith(_PDF_MAGIC):
            raise ContentError(
                "document",
                f"data is not a PDF (a PDF starts with %PDF-, this starts {raw[:8]!r}); for "
                "text use DocumentBlock.from_text(...) or media_type='text/plain'",
            )
        if self.media_type == "text/plain":
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError:
                raise ContentError(
                    "document",
                    "text/plain data is not UTF-8; decode it yourself and pass the text to "
                    "DocumentBlock.from_text(...)",
                ) from None

    @classmethod
    def from_bytes(
        cls,
        data: bytes,
        media_type: str = "application/pdf",
        *,
        title: str | None = None,
        filename: str | None = None,
    ) -> DocumentBlock:
        """A document from its raw bytes (base64-encoded here)."""
        encoded = base64.b64encode(data).decode("ascii")
        return cls(media_type, encoded, title=title, filename=filename)

    @classmethod
    def from_text(
        cls, text: str, *, title: str | None = None, filename: str | None = None
    ) -> DocumentBlock:
        """A plain-text document."""
        return cls.from_bytes(text.encode(), "text/plain", title=title, filename=filename)

    @classmethod
    def from_url(
        cls,
        url: str,
        media_type: str = "application/pdf",
        *,
        title: str | None = None,
        filename: str | None = None,
    ) -> DocumentBlock:
        """A document the provider fetches from ``url`` (http or https)."""
        return cls(media_type, "", url, title, filename)

    @property
    def text(self) -> str:
        """The text of a plain-text document given by data ('' for a PDF or a URL)."""
        if self.media_type != "text/plain" or not self.data:
            return ""
        return base64.b64decode(self.data).decode("utf-8")

    @property
    def name(self) -> str:
        """The file name sent where a provider wants one."""
        if self.filename:
            return self.filename
        return "document.pdf" if self.media_type == "application/pdf" else "document.txt"

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
    content: str = attrs.field(converter=encodable)
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
    | DocumentBlock
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
    def _memo(self) -> dict[str, Any]:
        """What is derived from this message once and kept with it (its fingerprint's
        text): a message is frozen, so it stays right, and a long conversation pays for
        each message once, not at every call."""
        return {}

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
    estimated: bool = False
    """The counts (or some of those summed here) are innerloop's own, made with the run's
    token counter, because the server reported no usage (llama.cpp's streams, for one)."""

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_creation_tokens + other.cache_creation_tokens,
            self.thinking_tokens + other.thinking_tokens,
            self.estimated or other.estimated,
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
