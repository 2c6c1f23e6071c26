"""ToolRunner: validation before running, timeouts that stop work, structured failures,
output caps, parallel dispatch in block order."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path
from typing import Any

from innerloop.recovery import ApproxTokenCounter
from innerloop.tools import (
    OutputLimits,
    ToolContext,
    ToolError,
    ToolOutput,
    ToolRunner,
    cap_output,
    tool,
)


@tool(isolated=True, timeout=4.0)
def spin(pid_file: str) -> int:
    """Burn CPU forever, after writing the process id to pid_file."""
    Path(pid_file).write_text(str(os.getpid()))
    n = 0
    while True:
        n += 1


@tool(isolated=True)
def whoami(shout: bool = False) -> dict[str, Any]:
    """Return this process's id; print something."""
    print("hello from the child")
    return {"pid": os.getpid(), "shout": shout}


@tool(isolated=True)
def explode() -> None:
    """Fail in the child."""
    raise KeyError("missing thing")


class TestValidation:
    def test_bad_arguments_do_not_run_the_tool(self, call_tool: Any) -> None:
        """Bad arguments become an is_error result naming each field; the tool never runs."""
        ran: list[int] = []

        @tool
        def add(a: int, b: int) -> int:
            """Add."""
            ran.append(1)
            return a + b

        result = call_tool(add, "add", {"a": "1", "c": 2})
        assert result.is_error and result.error == "invalid_arguments"
        assert result.output == (
            "invalid arguments for tool 'add', the tool was not run: missing required field "
            "'b'; field 'a': expected integer, got string '1'; unexpected field 'c' "
            "(allowed: a, b)"
        )
        assert ran == []

    def test_unknown_tool(self, call_tool: Any) -> None:
        """A call to a tool that does not exist lists the available ones."""

        @tool
        def add(a: int) -> int:
            """Add."""
            return a

        result = call_tool(add, "sub", {})
        assert (result.is_error, result.output) == (True, "unknown tool 'sub'; available: add")


class TestResults:
    def test_return_values(self, call_tool: Any) -> None:
        """Return values are rendered for the model and kept as value."""

        @tool
        def pair(a: int) -> dict[str, int]:
            """Pair."""
            return {"a": a}

        result = call_tool(pair, "pair", {"a": 2})
        assert (result.output, result.value, result.is_error) == ('{"a": 2}', {"a": 2}, False)
        assert result.duration >= 0

    def test_context_reaches_the_tool(self, call_tool: Any, tmp_path: Path) -> None:
        """A ToolContext parameter gets the call id, the run's state, workspace and limit."""

        @tool(timeout=3)
        def where(ctx: ToolContext) -> str:
            """Where am I."""
            ctx.state.notes["seen"] = True
            return f"{ctx.tool_use_id} {ctx.workspace} {ctx.timeout} {ctx.params.model}"

        result = call_tool(where, "where", {}, runner=ToolRunner(workspace=tmp_path))
        assert result.output == f"toolu_0 {tmp_path} 3 scripted:m"

    def test_exceptions_become_structured_errors(self, call_tool: Any) -> None:
        """An exception is reported with its type; ToolError with its message only."""

        @tool
        def boom() -> None:
            """Boom."""
            raise ZeroDivisionError("division by zero")

        @tool
        async def refuse() -> None:
            """Refuse."""
            raise ToolError("not today")

        result = call_tool(boom, "boom", {})
        assert (result.is_error, result.error) == (True, "ZeroDivisionError")
        assert result.output == "tool 'boom' raised ZeroDivisionError: division by zero"
        result = call_tool(refuse, "refuse", {})
        assert (result.output, result.error) == ("not today", "tool_error")

    def test_output_is_capped_in_bytes(self, call_tool: Any) -> None:
        """A huge result keeps head and tail around a notice of the cut."""

        @tool
        def big() -> str:
            """Big."""
            return "a" * 500_000 + "END"

        runner = ToolRunner(limits=OutputLimits(max_bytes=2_000, max_tokens=None))
        result = call_tool(big, "big", {}, runner=runner)
        assert len(result.output.encode()) <= 2_000
        assert result.output.startswith("aaa") and result.output.endswith("END")
        assert "[... output truncated: " in result.output
        assert "the full output was 500,003 bytes" in result.output

    def test_output_is_capped_in_tokens(self) -> None:
        """The token cap holds with the counter given."""
        counter = ApproxTokenCounter()
        text = "word " * 10_000
        capped = cap_output(text, counter, OutputLimits(max_bytes=None, max_tokens=300))
        assert counter.count_text(capped) <= 300
        assert "limit 300 tokens" in capped
        assert cap_output("short", counter, OutputLimits()) == "short"


class TestTimeouts:
    def test_async_tool_is_cancelled(self, call_tool: Any) -> None:
        """An async tool is cancelled at its timeout; the result says the limit."""
        cancelled = threading.Event()

        @tool(timeout=0.3)
        async def slow() -> None:
            """Slow."""
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                cancelled.set()
                raise

        start = time.monotonic()
        result = call_tool(slow, "slow", {})
        assert time.monotonic() - start < 1.0
        assert (result.is_error, result.timed_out, result.error) == (True, True, "timeout")
        assert result.output.startswith("tool 'slow' timed out after 0.3 s (limit 0.3 s from ")
        assert result.output.endswith("the tool's own timeout); it was stopped")
        assert cancelled.is_set()

    def test_category_timeout(self, call_tool: Any) -> None:
        """Without its own timeout a tool gets its category's limit from params."""

        @tool(category="network")
        async def fetch() -> None:
            """Fetch."""
            await asyncio.sleep(10)

        result = call_tool(fetch, "fetch", {}, tool_timeouts={"network": 0.2})
        assert result.timed_out
        assert "(limit 0.2 s from category 'network')" in result.output

    def test_sync_tool_times_out_but_keeps_running(self, call_tool: Any) -> None:
        """A sync tool is reported at its timeout; its thread cannot be killed."""
        finished = threading.Event()

        @tool(timeout=0.2)
        def sleepy() -> None:
            """Sleepy."""
            time.sleep(0.6)
            finished.set()

        start = time.monotonic()
        result = call_tool(sleepy, "sleepy", {})
        assert time.monotonic() - start < 0.5
        assert result.timed_out
        assert result.output.endswith(
            "it may still be running in its worker thread (sync tools cannot be killed)"
        )
        assert finished.wait(2)

    def test_tool_raising_timeout_error_is_not_a_timeout(self, call_tool: Any) -> None:
        """A TimeoutError raised by the tool itself is an ordinary failure."""

        @tool
        async def net() -> None:
            """Net."""
            raise TimeoutError("upstream slow")

        result = call_tool(net, "net", {})
        assert (result.timed_out, result.output) == (
            False,
            "tool 'net' raised TimeoutError: upstream slow",
        )


class TestIsolated:
    def test_runs_in_a_child_process(self, call_tool: Any) -> None:
        """An isolated tool runs in another process; its prints are its stdout."""
        result = call_tool(whoami, "whoami", {"shout": True})
        assert not result.is_error, result.output
        assert result.value["pid"] != os.getpid() and result.value["shout"] is True
        assert result.stdout == "hello from the child\n"
        assert result.exit_code == 0

    def test_cpu_bound_tool_is_killed_at_its_timeout(
        self, call_tool: Any, tmp_path: Path, gone: Any
    ) -> None:
        """A CPU-bound isolated tool is killed at its timeout and its process is gone."""
        pid_file = tmp_path / "pid"
        start = time.monotonic()
        result = call_tool(spin, "spin", {"pid_file": str(pid_file)})
        assert 3.9 < time.monotonic() - start < 8.0
        assert (result.timed_out, result.is_error) == (True, True)
        assert result.output.endswith("(limit 4 s from the tool's own timeout); it was stopped")
        assert gone(int(pid_file.read_text()))

    def test_exception_in_the_child(self, call_tool: Any) -> None:
        """An exception in the child comes back as a structured error with its type."""
        result = call_tool(explode, "explode", {})
        assert result.is_error
        assert result.output == "KeyError: 'missing thing'"


class TestParallel:
    def test_results_in_block_order_and_concurrent(self, call_tools: Any) -> None:
        """Calls run concurrently; results come back in the order of the calls."""

        @tool
        async def nap(seconds: float, tag: str) -> str:
            """Nap."""
            await asyncio.sleep(seconds)
            return tag

        start = time.monotonic()
        results = call_tools(
            [nap],
            [("nap", {"seconds": s, "tag": t}) for s, t in [(0.3, "a"), (0.1, "b"), (0.2, "c")]],
        )
        assert time.monotonic() - start < 0.5
        assert [r.output for r in results] == ["a", "b", "c"]
        assert [r.tool_use_id for r in results] == ["toolu_0", "toolu_1", "toolu_2"]

    def test_bound(self, call_tools: Any) -> None:
        """No more than max_parallel_tools calls run at once."""
        running, peak = [0], [0]

        @tool
        async def busy() -> None:
            """Busy."""
            running[0] += 1
            peak[0] = max(peak[0], running[0])
            await asyncio.sleep(0.05)
            running[0] -= 1

        results = call_tools([busy], [("busy", {})] * 6, max_parallel_tools=2)
        assert len(results) == 6 and not any(r.is_error for r in results)
        assert peak[0] == 2

    def test_handler_returning_garbage(self, call_tool: Any) -> None:
        """A handler returning the wrong type is an error, not a crash (a broken schema is
        refused when the tool is defined: tests/tools/test_tool_schema.py)."""
        from innerloop.tools import ToolSpec

        async def handler(args: Any, ctx: Any) -> Any:
            return 42

        spec = ToolSpec("raw", "Raw.", {"type": "object"}, handler)
        result = call_tool(spec, "raw", {})
        assert result.output == "tool 'raw' handler returned int, not ToolOutput"
        ok = ToolSpec("ok", "Ok.", {"type": "object"}, lambda a, c: _done(ToolOutput("fine")))
        assert call_tool(ok, "ok", {}).output == "fine"


async def _done(value: ToolOutput) -> ToolOutput:
    return value
