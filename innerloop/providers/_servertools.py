"""Tools the provider runs itself: what each API calls them, and what it takes back.

Anthropic's Messages API runs ``web_search``, ``web_fetch`` and ``code_execution``; the
Responses API runs ``web_search``, ``file_search`` and ``code_interpreter``. Chat
Completions runs none. A :class:`ServerTool` names one; :func:`server_tool_definition`
gives its definition for one dialect (None where that API has no such tool). Their calls
and results come back as :class:`~innerloop._messages.ServerToolBlock` and go back,
verbatim, to the same API only (:func:`server_tool_wire`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import attrs

from innerloop._errors import ParamsError
from innerloop._messages import ServerToolBlock

__all__ = [
    "ANTHROPIC_SERVER_BLOCKS",
    "RESPONSES_SERVER_ITEMS",
    "SERVER_TOOLS",
    "ServerTool",
    "check_server_tools",
    "server_tool_definition",
    "server_tool_wire",
]

SERVER_TOOLS: Mapping[str, Mapping[str, Mapping[str, Any]]] = MappingProxyType(
    {
        "web_search": {
            "anthropic": {"type": "web_search_20250305", "name": "web_search"},
            "responses": {"type": "web_search"},
        },
        "web_fetch": {"anthropic": {"type": "web_fetch_20250910", "name": "web_fetch"}},
        "code_execution": {
            "anthropic": {"type": "code_execution_20250825", "name": "code_execution"}
        },
        "file_search": {"responses": {"type": "file_search"}},
        "code_interpreter": {
            "responses": {"type": "code_interpreter", "container": {"type": "auto"}}
        },
    }
)
"""Each server tool's definition per dialect that runs it (``options`` are added to it)."""

_REQUIRED: Mapping[str, tuple[str, ...]] = MappingProxyType({"file_search": ("vector_store_ids",)})
"""Options a server tool cannot go without."""

_FIX = {
    "openai": "the Chat Completions API runs no server tools: use OpenAIResponsesProvider "
    "for this model",
    "anthropic": "run it through OpenAIResponsesProvider, or use an Anthropic server tool",
    "responses": "run it through AnthropicProvider, or use a Responses API server tool",
}

ANTHROPIC_SERVER_BLOCKS = frozenset({"server_tool_use", "mcp_tool_use", "mcp_tool_result"})
"""Anthropic content blocks kept as server-tool blocks (besides every ``*_tool_result``)."""

RESPONSES_SERVER_ITEMS = frozenset({"web_search_call", "file_search_call", "code_interpreter_call"})
"""Responses API output items kept as server-tool blocks."""


def _options(value: Mapping[str, Any]) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ParamsError(
            "server_tools", f"options must be a mapping of definition fields, got {value!r}"
        )
    return MappingProxyType(dict(value))


def _known(instance: object, attribute: attrs.Attribute[Any], value: str) -> None:
    if value not in SERVER_TOOLS:
        raise ParamsError(
            "server_tools",
            f"unknown server tool {value!r}; known: {', '.join(sorted(SERVER_TOOLS))}",
            value,
        )


@attrs.frozen
class ServerTool:
    """A tool the provider runs itself, e.g. ``ServerTool("web_search")`` or
    ``ServerTool("file_search", {"vector_store_ids": ["vs_..."]})``.

    ``name`` is one of :data:`SERVER_TOOLS`: ``web_search`` (Anthropic and the Responses
    API), ``web_fetch`` and ``code_execution`` (Anthropic), ``file_search`` and
    ``code_interpreter`` (Responses). ``options`` are added to the definition as the API
    takes them (``max_uses``, ``allowed_domains``, ``vector_store_ids``, ``container``; a
    ``type`` picks another version of the tool)."""

    name: str = attrs.field(validator=_known)
    options: Mapping[str, Any] = attrs.field(factory=dict, converter=_options)

    def __attrs_post_init__(self) -> None:
        missing = [k for k in _REQUIRED.get(self.name, ()) if k not in self.options]
        if missing:
            raise ParamsError(
                "server_tools",
                f"{self.name} needs {', '.join(missing)}: "
                f"ServerTool({self.name!r}, {{{missing[0]!r}: [...]}})",
                self.name,
            )

    def dialects(self) -> tuple[str, ...]:
        """The dialects that run it."""
        return tuple(SERVER_TOOLS[self.name])


def server_tool_definition(tool: ServerTool, dialect: str) -> dict[str, Any] | None:
    """``tool``'s definition in ``dialect``'s request; None when that API does not run it."""
    base = SERVER_TOOLS[tool.name].get(dialect)
    if base is None:
        return None
    return {**base, **tool.options}


def check_server_tools(tools: Sequence[ServerTool], dialect: str, where: str) -> None:
    """A :class:`ParamsError` when the primary model's route (``dialect``) cannot run one
    of ``tools``, naming the fix."""
    for tool in tools:
        if dialect not in SERVER_TOOLS[tool.name]:
            runs = " and ".join(
                {"anthropic": "Anthropic", "responses": "the Responses API"}[d]
                for d in tool.dialects()
            )
            fix = _FIX.get(dialect, "pick another model")
            raise ParamsError(
                "server_tools",
                f"server tool {tool.name!r} cannot run on {where} (its provider speaks "
                f"{dialect!r}; {tool.name} runs on {runs}): {fix}",
                tool.name,
            )


def server_tool_wire(block: ServerToolBlock, dialect: str) -> dict[str, Any] | None:
    """``block`` as ``dialect`` takes it back: verbatim for the API that made it (less the
    output-only search ``sources``), None for any other."""
    if block.dialect != dialect:
        return None
    data = dict(block.data)
    if block.kind == "web_search_call" and isinstance(data.get("action"), Mapping):
        data["action"] = {k: v for k, v in data["action"].items() if k != "sources"}
    return data
