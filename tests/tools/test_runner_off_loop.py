"""ToolRunner caps a short result on the loop and a long one in a worker thread (found by
`make mutation`: the boundaries were untested)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from innerloop.lowlevel import cap_output
from innerloop.tools import OutputLimits, ToolCallResult, ToolRunner, tool
from innerloop.tools import _runner as runner_module


@tool
def emit(n: int) -> str:
    """Return ``n`` characters."""
    return "x" * n


@pytest.fixture
def cap_threads(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """For each capped result: whether it was capped on the main (the loop's) thread."""
    on_main: list[bool] = []
    real = cap_output

    def recording(*args: Any) -> str:
        on_main.append(threading.current_thread() is threading.main_thread())
        return real(*args)

    monkeypatch.setattr(runner_module, "cap_output", recording)
    return on_main


@pytest.mark.parametrize(
    ("n", "max_tokens", "on_loop"),
    [
        (16_384, None, True),
        (16_385, None, False),
        (100, 100, True),
        (101, 100, False),
    ],
)
def test_only_a_long_output_is_capped_off_the_loop(
    call_tool: Callable[..., ToolCallResult],
    cap_threads: list[bool],
    n: int,
    max_tokens: int | None,
    on_loop: bool,
) -> None:
    limits = OutputLimits(max_bytes=None, max_tokens=max_tokens)
    result = call_tool(emit, "emit", {"n": n}, runner=ToolRunner(limits=limits))
    assert (result.output, result.is_error) == ("x" * n, False)
    assert cap_threads == [on_loop]
