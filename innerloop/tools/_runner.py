"""Runs the tool calls of one assistant turn: bounded parallelism, per-call timeouts,
every failure turned into an ``is_error`` result, results in the order of the calls."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from innerloop._messages import ToolUseBlock
from innerloop.tools._spec import ToolCallResult, ToolContext, ToolSpec

if TYPE_CHECKING:
    from innerloop.fsm._driver import Run

__all__ = ["ToolRunner"]


class ToolRunner:
    """Executes tool calls for a run. One instance per run (it holds eager tasks)."""

    def __init__(self) -> None:
        self._eager: dict[str, asyncio.Task[ToolCallResult]] = {}
        self._semaphore: asyncio.Semaphore | None = None

    def prestart(self, run: Run, call: ToolUseBlock) -> None:
        """Start ``call`` now (eager dispatch, while the message still streams)."""
        if call.id not in self._eager:
            self._eager[call.id] = self._start(run, call)

    async def run_calls(self, run: Run, calls: Sequence[ToolUseBlock]) -> list[ToolCallResult]:
        tasks = [
            self._eager.pop(c.id) if c.id in self._eager else self._start(run, c) for c in calls
        ]
        try:
            return list(await asyncio.gather(*tasks))
        except BaseException:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise

    def _start(self, run: Run, call: ToolUseBlock) -> asyncio.Task[ToolCallResult]:
        return asyncio.ensure_future(self._run_one(run, call))

    async def cancel_all(self) -> None:
        tasks = list(self._eager.values())
        self._eager.clear()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _run_one(self, run: Run, call: ToolUseBlock) -> ToolCallResult:
        if self._semaphore is None:
            self._semaphore = asyncio.Semaphore(run.params.max_parallel_tools)
        spec = run.params.tool(call.name)
        if spec is None:
            known = ", ".join(t.name for t in run.params.tools) or "none"
            return ToolCallResult(
                call.id, call.name, f"unknown tool {call.name!r}; available: {known}", True
            )
        async with self._semaphore:
            return await self.execute(run, spec, call)

    async def execute(self, run: Run, spec: ToolSpec, call: ToolUseBlock) -> ToolCallResult:
        timeout = run.params.timeout_for(spec)
        ctx = ToolContext(run.params, run.state, call.id)
        start = time.monotonic()
        try:
            out = await asyncio.wait_for(spec.handler(call.input, ctx), timeout)
        except TimeoutError:
            return ToolCallResult(
                call.id,
                call.name,
                f"tool {call.name!r} timed out after {timeout:g} s (limit for "
                f"category {spec.category!r})",
                is_error=True,
                timed_out=True,
                duration=time.monotonic() - start,
            )
        except Exception as exc:  # a tool's failure goes back to the model
            return ToolCallResult(
                call.id,
                call.name,
                f"tool {call.name!r} raised {type(exc).__name__}: {exc}",
                is_error=True,
                duration=time.monotonic() - start,
            )
        return ToolCallResult(
            call.id,
            call.name,
            out.content,
            is_error=out.is_error,
            duration=time.monotonic() - start,
            stdout=out.stdout,
            stderr=out.stderr,
            exit_code=out.exit_code,
            value=out.value,
        )
