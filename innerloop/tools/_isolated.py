"""Isolated tools: the function runs in a child Python process that a timeout can kill.

The parent starts a ``python -c`` child with MODULE QUALNAME RESULT_PATH as arguments, in
its own process group, writes the JSON arguments to its stdin, and reads a pickled
``("ok", value)`` or ``("error", type name, message)`` from RESULT_PATH. What the function
prints becomes the call's stdout and stderr.
"""

from __future__ import annotations

import importlib
import json
import os
import pickle
import sys
import tempfile
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from innerloop.tools._process import run_process
from innerloop.tools._render import render_value
from innerloop.tools._spec import ToolContext, ToolError, ToolOutput

__all__ = ["call_isolated"]

_CHILD = "import sys; from innerloop.tools._isolated import _child_main; _child_main(sys.argv[1:])"


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p) or os.getcwd()
    return env


async def call_isolated(
    fn: Callable[..., Any], args: Mapping[str, Any], ctx: ToolContext
) -> ToolOutput:
    """Run ``fn(**args)`` in a child process; see the module docstring."""
    with tempfile.TemporaryDirectory(prefix="innerloop-isolated-") as tmp:
        result_path = Path(tmp) / "result.pickle"
        proc = await run_process(
            [sys.executable, "-c", _CHILD, fn.__module__, fn.__qualname__, str(result_path)],
            env=_child_env(),
            stdin=json.dumps(dict(args)).encode(),
            on_partial=ctx.keep_partial,
        )
        if not result_path.exists():
            raise ToolError(
                f"the isolated process exited with code {proc.exit_code} without a result"
                + (f"; stderr: {proc.stderr.strip()[-2000:]}" if proc.stderr.strip() else "")
            )
        outcome = pickle.loads(result_path.read_bytes())
    if outcome[0] == "error":
        raise ToolError(f"{outcome[1]}: {outcome[2]}")
    value = outcome[1]
    content = render_value(value)
    if value is None and proc.stdout:
        content = proc.stdout
    return ToolOutput(
        content, stdout=proc.stdout, stderr=proc.stderr, exit_code=proc.exit_code, value=value
    )


def _resolve(module: str, qualname: str) -> Callable[..., Any]:
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    function = getattr(obj, "function", None)  # @tool replaced the name with its ToolSpec
    return function if callable(function) else obj  # type: ignore[no-any-return]


def _child_main(argv: list[str]) -> None:
    from innerloop.tools._schema import signature_of

    module, qualname, result_path = argv
    args = json.loads(sys.stdin.read() or "{}")
    try:
        fn = _resolve(module, qualname)
        kwargs = signature_of(fn, qualname).kwargs(args, None)
        value = fn(**kwargs)
        try:
            payload = pickle.dumps(("ok", value))
        except Exception as exc:
            payload = pickle.dumps(
                ("error", "TypeError", f"the return value cannot be pickled: {exc}")
            )
    except Exception as exc:
        traceback.print_exc()
        payload = pickle.dumps(("error", type(exc).__name__, str(exc)))
    Path(result_path).write_bytes(payload)
