"""What the model reads for a tool's return value."""

from __future__ import annotations

import enum
import json
from typing import Any

import attrs

from innerloop.tools._spec import ToolOutput

__all__ = ["as_output", "render_value"]


def render_value(value: Any) -> str:
    """The text the model sees for a tool's return value: strings as they are, anything
    else as JSON (attrs instances, dataclasses and pydantic models as objects, enums as
    their values)."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return json.dumps(value, default=_json_default, ensure_ascii=False)


def _json_default(value: Any) -> Any:
    if attrs.has(type(value)):
        return attrs.asdict(value, recurse=False)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    import pydantic_core  # loaded when first needed: import innerloop leaves it out

    return pydantic_core.to_jsonable_python(value, fallback=repr)


def as_output(value: Any) -> ToolOutput:
    """A tool function's return value as the handler's :class:`ToolOutput`."""
    if isinstance(value, ToolOutput):
        return value
    return ToolOutput(render_value(value), value=value)
