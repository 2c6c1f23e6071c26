"""What the loopback servers refuse, as the real APIs do: malformed images, documents and
files, and bad prompt-cache settings. Each check returns the 400's message, or None.

The shapes are those of the SDKs' request types (``anthropic.types.DocumentBlockParam``,
``openai.types.chat.ChatCompletionContentPartParam``,
``openai.types.responses.ResponseInputFileParam`` ...); the messages follow the APIs'.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["anthropic_refusal", "chat_refusal", "responses_refusal"]

IMAGE_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")
MAX_CACHE_BREAKPOINTS = 4
_DATA_URL = re.compile(r"data:([\w.+-]+/[\w.+-]+);base64,(.*)", re.DOTALL)
_UNMARKABLE = ("thinking", "redacted_thinking")


def _base64(data: Any) -> bytes | None:
    if not isinstance(data, str) or not data:
        return None
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None


def _http(url: Any) -> bool:
    return isinstance(url, str) and url.startswith(("https://", "http://"))


def _choices(values: tuple[str, ...]) -> str:
    quoted = [f"'{v}'" for v in values]
    return ", ".join(quoted[:-1]) + f" or {quoted[-1]}" if len(quoted) > 1 else quoted[0]


# -- Anthropic Messages -----------------------------------------------------------------------


def _image_base64(path: str, source: dict[str, Any]) -> str | None:
    if source.get("media_type") not in IMAGE_TYPES:
        return f"{path}.source.base64.media_type: Input should be {_choices(IMAGE_TYPES)}"
    if _base64(source.get("data")) is None:
        return f"{path}.source.base64.data: The image data is not valid base64"
    return None


def _pdf_base64(path: str, source: dict[str, Any]) -> str | None:
    if source.get("media_type") != "application/pdf":
        return f"{path}.source.base64.media_type: Input should be 'application/pdf'"
    raw = _base64(source.get("data"))
    if raw is None or not raw.startswith(b"%PDF-"):
        return f"{path}.source.base64.data: The PDF specified was not valid."
    return None


def _plain_text(path: str, source: dict[str, Any]) -> str | None:
    if source.get("media_type") != "text/plain":
        return f"{path}.source.text.media_type: Input should be 'text/plain'"
    if not isinstance(source.get("data"), str):
        return f"{path}.source.text.data: Input should be a valid string"
    return None


def _source_url(path: str, source: dict[str, Any]) -> str | None:
    return None if _http(source.get("url")) else f"{path}.source.url.url: Invalid URL"


_SourceCheck = Callable[[str, dict[str, Any]], str | None]
_ANTHROPIC_SOURCES: dict[str, tuple[dict[str, _SourceCheck], tuple[str, ...]]] = {
    "image": ({"base64": _image_base64, "url": _source_url}, ("base64", "url", "file")),
    "document": (
        {"base64": _pdf_base64, "text": _plain_text, "url": _source_url},
        ("base64", "text", "content", "url", "file"),
    ),
}
"""Per block type: the checks of the source types the servers take, and the tags the API
names (a tag the servers do not take, such as ``file``, is refused like an unknown one)."""


def _anthropic_source(path: str, block: str, source: Any) -> str | None:
    checks, tags = _ANTHROPIC_SOURCES[block]
    kind = source.get("type") if isinstance(source, dict) else None
    check = checks.get(kind) if isinstance(kind, str) else None
    if check is not None:
        return check(f"{path}.{block}", source)
    return (
        f"{path}.{block}.source: Input tag {kind!r} found using 'type' does not match any of "
        f"the expected tags: {', '.join(map(repr, tags))}"
    )


def _cache_control(path: str, mark: Any) -> str | None:
    if not isinstance(mark, dict) or mark.get("type") != "ephemeral":
        return f"{path}.cache_control.type: Input should be 'ephemeral'"
    if "ttl" in mark and mark["ttl"] not in ("5m", "1h"):
        return f"{path}.cache_control.ephemeral.ttl: Input should be '5m' or '1h'"
    return None


def _anthropic_marks(body: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every block that may carry ``cache_control``, with its path, in prefix order: tools,
    system, messages."""
    for i, tool in enumerate(body.get("tools") or ()):
        if isinstance(tool, dict):
            yield f"tools.{i}", tool
    system = body.get("system")
    for i, block in enumerate(system if isinstance(system, list) else ()):
        if isinstance(block, dict):
            yield f"system.{i}", block
    for i, message in enumerate(body.get("messages") or ()):
        content = message.get("content") if isinstance(message, dict) else None
        for j, block in enumerate(content if isinstance(content, list) else ()):
            if isinstance(block, dict):
                yield f"messages.{i}.content.{j}", block


def _anthropic_cache(body: dict[str, Any]) -> str | None:
    found, short_seen = 0, False
    for path, block in _anthropic_marks(body):
        if "cache_control" not in block:
            continue
        if block.get("type") in _UNMARKABLE:
            return f"{path}.{block['type']}.cache_control: Extra inputs are not permitted"
        refused = _cache_control(path, block["cache_control"])
        if refused is not None:
            return refused
        found += 1
        long = block["cache_control"].get("ttl") == "1h"
        if long and short_seen:
            return (
                "a ttl='1h' cache_control block must not come after a ttl='5m' cache_control "
                f"block (at {path}); put longer-lived breakpoints first"
            )
        short_seen = short_seen or not long
    if found > MAX_CACHE_BREAKPOINTS:
        return (
            f"A maximum of {MAX_CACHE_BREAKPOINTS} blocks with cache_control may be provided. "
            f"Found {found}."
        )
    return None


def anthropic_refusal(body: dict[str, Any]) -> str | None:
    """Why the Messages API would refuse ``body``'s images, documents or cache marks."""
    for path, block in _anthropic_marks(body):
        if not path.startswith("messages."):
            continue
        kind = block.get("type")
        if isinstance(kind, str) and kind in _ANTHROPIC_SOURCES:
            refused = _anthropic_source(path, kind, block.get("source"))
            if refused is not None:
                return refused
    return _anthropic_cache(body)


# -- OpenAI: Chat Completions and Responses ---------------------------------------------------


def _openai_cache(body: dict[str, Any]) -> str | None:
    key = body.get("prompt_cache_key")
    if key is not None and not isinstance(key, str):
        return "Invalid type for 'prompt_cache_key': expected a string."
    retention = body.get("prompt_cache_retention")
    if retention is not None and retention not in ("in_memory", "24h"):
        return (
            f"Invalid value: '{retention}'. Supported values are: 'in_memory' and '24h'. "
            "(param: prompt_cache_retention)"
        )
    return None


def _image_url(path: str, url: Any) -> str | None:
    if _http(url):
        return None
    match = _DATA_URL.fullmatch(url) if isinstance(url, str) else None
    if match is None or match.group(1) not in IMAGE_TYPES or _base64(match.group(2)) is None:
        return (
            f"Invalid '{path}'. Expected a valid URL, or a base64-encoded data URL of an image "
            f"of type {', '.join(IMAGE_TYPES)}."
        )
    return None


def _file_data(path: str, data: Any, pdf_only: bool) -> str | None:
    match = _DATA_URL.fullmatch(data) if isinstance(data, str) else None
    if match is None or _base64(match.group(2)) is None:
        return f"Invalid '{path}'. Expected a base64-encoded data URL (data:<type>;base64,...)."
    if pdf_only and match.group(1) != "application/pdf":
        return (
            f"Invalid '{path}'. Chat Completions takes only PDF files (application/pdf), "
            f"got {match.group(1)}."
        )
    return None


def _parts(body: dict[str, Any], key: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """The content parts of the user messages in ``body[key]``, with their paths."""
    for i, message in enumerate(body.get(key) or ()):
        if not isinstance(message, dict) or message.get("role") != "user":
            continue
        content = message.get("content")
        for j, part in enumerate(content if isinstance(content, list) else ()):
            if isinstance(part, dict):
                yield f"{key}[{i}].content[{j}]", part


_CHAT_PARTS = ("text", "image_url", "input_audio", "file")


def _chat_part(path: str, part: dict[str, Any]) -> str | None:
    kind = part.get("type")
    if kind not in _CHAT_PARTS:
        return (
            f"Invalid value: '{kind}'. Supported values are: "
            f"{', '.join(repr(k) for k in _CHAT_PARTS)}. (param: {path}.type)"
        )
    if kind == "image_url":
        return _image_url(f"{path}.image_url.url", (part.get("image_url") or {}).get("url"))
    if kind == "file":
        file = part.get("file") or {}
        if "file_url" in file:
            return f"Unrecognized request argument supplied: {path}.file.file_url"
        if "file_data" in file:
            return _file_data(f"{path}.file.file_data", file["file_data"], pdf_only=True)
        if not file.get("file_id"):
            return f"Missing required parameter: '{path}.file.file_data' or '{path}.file.file_id'."
    return None


def chat_refusal(body: dict[str, Any]) -> str | None:
    """Why Chat Completions would refuse ``body``'s images, files or cache settings."""
    for path, part in _parts(body, "messages"):
        refused = _chat_part(path, part)
        if refused is not None:
            return refused
    return _openai_cache(body)


_RESPONSES_PARTS = ("input_text", "input_image", "input_file", "input_audio")


def _responses_part(path: str, part: dict[str, Any]) -> str | None:
    kind = part.get("type")
    if kind not in _RESPONSES_PARTS:
        return (
            f"Invalid value: '{kind}'. Supported values are: "
            f"{', '.join(repr(k) for k in _RESPONSES_PARTS)}. (param: {path}.type)"
        )
    if kind == "input_image":
        if part.get("detail") not in ("low", "high", "auto", "original"):
            return f"Missing required parameter: '{path}.detail'."
        return (
            None if part.get("file_id") else _image_url(f"{path}.image_url", part.get("image_url"))
        )
    if kind == "input_file":
        given = [k for k in ("file_data", "file_id", "file_url") if part.get(k)]
        if len(given) != 1:
            return (
                f"Invalid '{path}': give exactly one of 'file_data', 'file_id' and 'file_url', "
                f"got {len(given)}."
            )
        if given == ["file_url"] and not _http(part["file_url"]):
            return f"Invalid '{path}.file_url'. Expected a valid URL."
        if given == ["file_data"]:
            return _file_data(f"{path}.file_data", part["file_data"], pdf_only=False)
    return None


def responses_refusal(body: dict[str, Any]) -> str | None:
    """Why the Responses API would refuse ``body``'s images, files or cache settings."""
    for path, part in _parts(body, "input"):
        refused = _responses_part(path, part)
        if refused is not None:
            return refused
    return _openai_cache(body)
