"""ToolRunner: validation before running, timeouts that stop work, structured failures,
output caps, parallel dispatch in block order."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Annotated, Any

import pydantic
import pytest

from innerloop import HarnessParams
from innerloop._messages import ToolUseBlock
from innerloop.lowlevel import cap_output
from innerloop.recovery import ApproxTokenCounter
from innerloop.tools import (
    OutputLimits,
    ToolContext,
    ToolError,
    ToolOutput,
    ToolRunner,
    run_process,
    tool,
)
from innerloop.tools._process import CAPTURE_LIMIT
from tests.tools.conftest import fake_run


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


VALIDATED: list[int] = []
"""The values ``Noted`` validated (a test clears it first)."""


def _noted(value: int) -> int:
    VALIDATED.append(value)
    return value * 10


Noted = Annotated[int, pydantic.AfterValidator(_noted)]
"""An int times ten, noted in ``VALIDATED`` each time it is validated."""


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
        assert result.is_error
        assert result.error == "invalid_arguments"
        assert result.output == (
            "invalid arguments for tool 'add', the tool was not run: missing required field "
            "'b'; field 'a': expected integer, got string '1'; unexpected field 'c' "
            "(allowed: a, b)"
        )
        assert ran == []

    def test_arguments_are_validated_once_per_call(self, call_tool: Any) -> None:
        """A @tool's arguments are validated once when the runner calls it (the handler
        takes the runner's values), and again when its handler is called directly."""
        seen = VALIDATED
        seen.clear()

        @tool
        async def scale(n: Noted) -> int:
            """Scale."""
            return n

        result = call_tool(scale, "scale", {"n": 4})
        assert (result.output, seen) == ("40", [4])
        out: ToolOutput = asyncio.run(scale.handler({"n": 5}, None))  # type: ignore[arg-type]
        assert (out.content, seen) == ("50", [4, 5])

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
            assert isinstance(ctx.params, HarnessParams)
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
        assert result.output.startswith("aaa")
        assert result.output.endswith("END")
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
        assert time.monotonic() - start < 5.0  # not the 10 s the tool would sleep
        assert (result.is_error, result.timed_out, result.error) == (True, True, "timeout")
        assert result.output.startswith("tool 'slow' timed out after ")
        assert " s (limit 0.3 s from " in result.output
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

    def test_blocking_before_the_first_wait_counts_against_the_limit(self, call_tool: Any) -> None:
        """Time a tool spends before it first waits counts: past its limit, the first
        wait times out at once."""

        @tool(timeout=0.2)
        async def stalls() -> None:
            """Stalls."""
            time.sleep(0.3)  # noqa: ASYNC251 - the point: blocking before the first await
            await asyncio.sleep(10)

        start = time.monotonic()
        result = call_tool(stalls, "stalls", {})
        assert time.monotonic() - start < 5.0
        assert (result.timed_out, result.error) == (True, "timeout")
        assert result.output.startswith("tool 'stalls' timed out after ")
        assert " s (limit 0.2 s from " in result.output

    def test_a_tool_that_waits_gets_what_it_awaited(self, call_tool: Any) -> None:
        """A tool that waits several times gets each awaited value, and an exception
        raised into it where it waits is its own to catch."""

        @tool(timeout=5.0)
        async def waits() -> str:
            """Waits."""
            loop = asyncio.get_running_loop()
            first: asyncio.Future[str] = loop.create_future()
            loop.call_soon(first.set_result, "a")
            failing: asyncio.Future[str] = loop.create_future()
            loop.call_soon(failing.set_exception, KeyError("b"))
            try:
                await failing
            except KeyError as exc:
                caught = str(exc)
            await asyncio.sleep(0)
            return await first + caught

        result = call_tool(waits, "waits", {})
        assert (result.is_error, result.output) == (False, "a'b'")

    def test_an_abort_reaches_a_waiting_tool(self) -> None:
        """Cancelling the run's tool call cancels the tool where it waits."""
        seen: list[str] = []

        async def main() -> Any:
            waiting = asyncio.Event()

            @tool(timeout=5.0)
            async def parked() -> None:
                """Parked."""
                waiting.set()
                try:
                    await asyncio.sleep(10)
                except asyncio.CancelledError:
                    seen.append("cancelled")
                    raise

            task = asyncio.ensure_future(
                ToolRunner().run_calls(fake_run([parked]), [ToolUseBlock("t", "parked", {})])
            )
            await waiting.wait()
            task.cancel()
            return await task

        batch = asyncio.run(main())
        assert (batch.cancelled, batch.results[0].error, seen) == (True, "aborted", ["cancelled"])


class TestIsolated:
    def test_runs_in_a_child_process(self, call_tool: Any) -> None:
        """An isolated tool runs in another process; its prints are its stdout."""
        result = call_tool(whoami, "whoami", {"shout": True})
        assert not result.is_error, result.output
        assert result.value["pid"] != os.getpid()
        assert result.value["shout"] is True
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
        assert len(results) == 6
        assert not any(r.is_error for r in results)
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


def naps() -> tuple[str, str]:
    from tests.tools.test_sandbox import naps as make

    return make()


class TestBaseExceptions:
    def test_sys_exit_is_a_result(self, call_tool: Any) -> None:
        """sys.exit() in a sync or an async tool is an is_error result, not the host's end."""

        @tool
        def quit_sync() -> None:
            """Quit."""
            sys.exit(3)

        @tool
        async def quit_async() -> None:
            """Quit."""
            sys.exit("bye")

        result = call_tool(quit_sync, "quit_sync", {})
        assert (result.is_error, result.error) == (True, "SystemExit")
        assert result.output == "tool 'quit_sync' raised SystemExit: 3"
        assert call_tool(quit_async, "quit_async", {}).output == (
            "tool 'quit_async' raised SystemExit: bye"
        )

    def test_awaiting_a_cancelled_task_is_a_result(self, call_tools: Any) -> None:
        """A tool's own CancelledError (it awaited a cancelled task) is an is_error result;
        the other calls of the turn finish as usual."""

        @tool
        async def orphan() -> None:
            """Await a cancelled task."""
            task = asyncio.ensure_future(asyncio.sleep(10))
            await asyncio.sleep(0)
            task.cancel()
            await task

        @tool
        async def fine() -> str:
            """Fine."""
            await asyncio.sleep(0.05)
            return "fine"

        results = call_tools([orphan, fine], [("orphan", {}), ("fine", {})])
        assert [(r.output, r.error) for r in results] == [
            ("tool 'orphan' raised CancelledError", "CancelledError"),
            ("fine", None),
        ]
        single = call_tools([orphan], [("orphan", {})])[0]
        assert single.output == "tool 'orphan' raised CancelledError"

    def test_the_runs_own_cancellation_still_propagates(self) -> None:
        """An abort (the call's own task cancelled) is not turned into the tool's error
        result, even for a tool that saw a CancelledError of its own before: the batch
        comes back cancelled, the call aborted."""

        @tool
        async def stubborn() -> None:
            """Swallow a sub-task's cancellation, then wait."""
            task = asyncio.ensure_future(asyncio.sleep(10))
            await asyncio.sleep(0)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await asyncio.sleep(10)

        async def main() -> None:
            runner = ToolRunner()
            call = ToolUseBlock("t1", "stubborn", {})
            task = asyncio.ensure_future(runner.run_calls(fake_run([stubborn]), [call]))
            await asyncio.sleep(0.1)
            task.cancel()
            batch = await task  # the executor's contract: a cancelled batch, not an error
            assert batch.cancelled
            assert [r.error for r in batch.results] == ["aborted"]

        asyncio.run(main())

    def test_keyboard_interrupt_propagates(self, call_tool: Any) -> None:
        """KeyboardInterrupt is the host's: it leaves the run like a Ctrl-C."""

        @tool
        async def interrupt() -> None:
            """Interrupt."""
            raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            call_tool(interrupt, "interrupt", {})


class TestSpawn:
    @pytest.mark.parametrize("reaper", [False, True])
    def test_cancel_during_spawn(self, tmp_path: Path, reaper: bool) -> None:
        """A cancellation while the child starts raises CancelledError (not ValueError) and
        leaves no process behind (without a reaper, none that stayed in the group)."""
        from tests.tools.test_sandbox import all_gone

        marker, line = naps()
        if not reaper:  # a setsid grandchild leaves the group: only a reaper finds it
            line = f"sleep {marker} & (sleep {marker} &)"

        async def main() -> None:
            task = asyncio.ensure_future(
                run_process(
                    ["/bin/sh", "-c", f"{line}; sleep {marker}"], cwd=tmp_path, reaper=reaper
                )
            )
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(main())
        assert all_gone(marker)

    def test_timeout_during_spawn(self, tmp_path: Path) -> None:
        """A tool timeout that lands while the child starts is reported as a timeout, and
        the calling task is not left half-cancelled."""
        from tests.tools.test_sandbox import all_gone

        marker, _ = naps()

        @tool(timeout=0.001)
        async def starter() -> str:
            """Start a child."""
            result = await run_process(["/bin/sh", "-c", f"sleep {marker}"], cwd=tmp_path)
            return result.stdout

        async def main() -> tuple[Any, int]:
            call = ToolUseBlock("t1", "starter", {})
            [result] = (await ToolRunner().run_calls(fake_run([starter]), [call])).results
            task = asyncio.current_task()
            assert task is not None
            return result, task.cancelling()

        result, cancelling = asyncio.run(main())
        assert (result.timed_out, result.error, cancelling) == (True, "timeout", 0)
        assert all_gone(marker)


HUGE_SCRIPT = """
import asyncio, json, sys, time
from innerloop._messages import ToolUseBlock
from innerloop.tools import ToolRunner, run_process, tool
from tests.tools.conftest import fake_run

def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) * 1024

def measure(make):
    open("/proc/self/clear_refs", "w").write("5")  # peak RSS := current RSS
    rss = status("VmRSS")
    start = time.monotonic()
    value = asyncio.run(make())
    return value, time.monotonic() - start, status("VmHWM") - rss

out = {}
for size in (2_000_000, 200_000_000):
    text, returned = "x" * size, []

    @tool(timeout=5)
    async def huge() -> str:
        "Huge."
        returned.append(time.monotonic())
        return text

    async def call():
        batch = await ToolRunner().run_calls(fake_run([huge]), [ToolUseBlock("t", "huge", {})])
        [r] = batch.results
        return time.monotonic() - returned[0], len(r.output.encode())

    (after, size_out), _, grown = measure(call)
    out[f"return {size}"] = {"after": after, "grown": grown, "bytes": size_out}
    del text

# a first print over the capture limit loads and allocates what any run's first does
# (modules imported on first use, the loop's child watcher), so the figure below is the
# cost of reading 200 MB, not of a first subprocess
asyncio.run(run_process(["/bin/sh", "-c", "head -c 3000000 /dev/zero"]))
command = ["/bin/sh", "-c", "head -c 200000000 /dev/zero | tr '\\\\0' x"]
result, took, grown = measure(lambda: run_process(command))
out["print 200000000"] = {"took": took, "grown": grown, "kept": len(result.stdout)}
print(json.dumps(out))
"""


class TestHugeOutput:
    def test_huge_results_cost_time_and_memory_bounded_by_the_cap(self) -> None:
        """A 200 MB return is reported within 100 ms of the tool's return, and capping
        it takes no more memory than capping a 2 MB one (the cap, not the size, bounds
        the work); a child printing 200 MB is read in memory bounded by the capture
        limit (1 MiB kept; about 3 MiB at the peak, with the pipe's buffers)."""
        proc = subprocess.run(
            [sys.executable, "-c", HUGE_SCRIPT],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=Path(__file__).parents[2],
        )
        assert proc.returncode == 0, proc.stderr
        figures = json.loads(proc.stdout)
        small, huge = figures["return 2000000"], figures["return 200000000"]
        cap = OutputLimits().max_bytes or 0
        assert huge["after"] < 0.1, figures
        assert huge["bytes"] <= cap
        assert small["bytes"] <= cap
        assert huge["grown"] - small["grown"] < 3 * cap, figures
        printed = figures["print 200000000"]
        assert printed["kept"] < CAPTURE_LIMIT + 1_000
        assert printed["grown"] < 4 * CAPTURE_LIMIT, figures  # pipe buffers included

    def test_cap_output_does_not_tokenize_the_whole(self) -> None:
        """Tokens are counted only on the byte-capped text."""
        seen: list[int] = []

        class Counting(ApproxTokenCounter):
            def count_text(self, text: str) -> int:
                seen.append(len(text))
                return super().count_text(text)

        capped = cap_output("y" * 10_000_000, Counting(), OutputLimits())
        assert len(capped.encode()) <= 64_000
        assert seen
        assert max(seen) <= 64_000
        assert "(the full output was 10,000,000 bytes; limit 64,000 bytes / 8,000 tokens)" in (
            capped
        )
