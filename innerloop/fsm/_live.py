"""What a log keeps of the params it cannot carry: ``tool_sources`` (live objects of the
host, such as an ``MCPServer``) and ``prepare_tools`` (code) are named, so a replay can say
what must be given again."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from innerloop.fsm._params import HarnessParams

__all__ = ["LIVE", "import_path_of", "live_named", "live_record"]


def import_path_of(obj: Any) -> str | None:
    """``module:qualname`` of a module-level function or class; None for a local one."""
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not module or not qualname or "<locals>" in qualname:
        return None
    return f"{module}:{qualname}"


LIVE = ("tool_sources", "prepare_tools")
"""Fields a log names but cannot carry (live objects, code): a replay is given them again."""


def live_record(params: HarnessParams[Any]) -> dict[str, Any]:
    """What a log keeps of ``params.tool_sources`` and ``params.prepare_tools``: each
    source's ``name`` and ``class`` (``module:qualname``), the hook's ``name`` and
    ``function`` (its import path, None for a local one); a field not set is left out."""
    data: dict[str, Any] = {}
    if params.tool_sources:
        data["tool_sources"] = [
            {"name": str(s.name), "class": import_path_of(type(s))} for s in params.tool_sources
        ]
    hook = params.prepare_tools
    if hook is not None:
        name = getattr(hook, "__qualname__", None) or type(hook).__qualname__
        data["prepare_tools"] = {"name": name, "function": import_path_of(hook)}
    return data


def live_named(data: Mapping[str, Any]) -> str | None:
    """The tool sources and hook a params record names, as a phrase (None: none)."""
    parts = []
    sources = data.get("tool_sources")
    if isinstance(sources, list) and sources:
        named = ", ".join(
            f"{s.get('name')!r} ({s.get('class') or 'a local class'})"
            for s in sources
            if isinstance(s, Mapping)
        )
        parts.append(f"tool_sources {named}")
    hook = data.get("prepare_tools")
    if isinstance(hook, Mapping):
        parts.append(f"prepare_tools {hook.get('function') or hook.get('name')!r}")
    return " and ".join(parts) or None
