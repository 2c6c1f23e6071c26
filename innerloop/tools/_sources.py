"""Tool sources: where a run reads tools again before each turn."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from innerloop.tools._spec import ToolSpec

__all__ = ["ToolSource"]


@runtime_checkable
class ToolSource(Protocol):
    """Tools that may change while a run goes on (an ``MCPServer`` is one).

    Given in ``HarnessParams(tool_sources=...)``, ``await source.tools()`` is read before
    each turn of a run; the tools it lists then are offered on that turn (besides
    ``params.tools``, and as ``params.prepare_tools`` chooses)."""

    name: str

    async def tools(self) -> tuple[ToolSpec, ...]: ...
