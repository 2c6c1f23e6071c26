"""An isolated tool for the TRACEPARENT test (module level: the child imports it)."""

from __future__ import annotations

import os

from innerloop import tool


@tool(isolated=True)
def traceparent() -> str:
    """The TRACEPARENT the tool's process received."""
    return os.environ.get("TRACEPARENT", "none")
