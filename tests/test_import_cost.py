"""What ``import innerloop`` leaves for first use (issue 23's import target): the SDKs and
the HTTP stack, the checkpoint stores with sqlite3, MCP, jsonschema, OpenTelemetry, the
price package and pydantic (the first ``@tool`` function or output type) load when a run
first needs them."""

from __future__ import annotations

import subprocess
import sys

LATER = (
    "anthropic",
    "genai_prices",
    "httpx2",
    "innerloop.checkpoint._memory",
    "innerloop.checkpoint._postgres",
    "innerloop.checkpoint._sqlite",
    "innerloop.tools._builtins",
    "innerloop.tools._mcp",
    "jsonschema",
    "mcp",
    "openai",
    "opentelemetry",
    "pydantic",
    "pydantic_core",
    "sqlite3",
)


def test_import_innerloop_leaves_the_optional_parts_unloaded() -> None:
    code = (
        "import sys, innerloop; "
        f"print(' '.join(m for m in {LATER!r} if m in sys.modules) or 'none')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "none"


def test_a_store_named_loads_on_first_use() -> None:
    code = (
        "import sys; from innerloop.checkpoint import SQLiteCheckpointer, driver_errors; "
        "import sqlite3; "
        "print(SQLiteCheckpointer.__module__, sqlite3.Error in driver_errors())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["innerloop.checkpoint._sqlite", "True"]
