"""The durable step interface: the machine runs unchanged, its three side-effecting objects
become named steps.

The machine, its guards and its phase handlers do no I/O except through three objects the
:class:`~innerloop.Harness` takes: the provider, the tool runner and the compactor. Inside
a durable workflow each is replaced by a stand-in that hands the work to the engine as a
step (``model_call``, ``tool_call``, ``compaction``) and turns the step's recorded result
back into what the machine expects. When the engine replays the workflow, the steps return
their recorded results and the machine takes exactly the same path again.

A step returns only what it adds: the model's response (or its error), one tool result,
the compacted history. The engine never stores the whole history per step.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

from innerloop._errors import ErrorCategory, InnerloopError, ProviderError
from innerloop._events import MessageComplete, StreamEvent
from innerloop._messages import ToolUseBlock, message_from_dict
from innerloop.durable._codec import (
    error_from_dict,
    response_from_dict,
    tool_result_from_dict,
)
from innerloop.providers._normalize import WireRequest
from innerloop.recovery._compaction import CompactionRequest, CompactionResult
from innerloop.recovery._tokens import MessageTokenCache
from innerloop.tools._runner import ToolBatch, ToolRunner, ToolScope, aborted_result
from innerloop.tools._spec import ToolCallResult

__all__ = [
    "COMPACTION",
    "MODEL_CALL",
    "TOOL_CALL",
    "StepCall",
    "StepCompactor",
    "StepLost",
    "StepProvider",
    "StepToolRunner",
]

MODEL_CALL = "model_call"
TOOL_CALL = "tool_call"
COMPACTION = "compaction"

StepCall = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]
"""``await call(step_name, args)``: runs one step through the engine, returns its result."""


class StepLost(InnerloopError):
    """The engine gave up on a step (for example every worker that ran it died).

    Failures of the work itself (a 429, a tool error) are never raised as this: they are
    results the machine routes.
    """


class _RecordedStream:
    """Replays a recorded model step: one ``MessageComplete``, or the recorded error."""

    def __init__(self, result: Mapping[str, Any]) -> None:
        self._result = result

    async def __aiter__(self) -> AsyncIterator[StreamEvent]:
        if "error" in self._result:
            raise error_from_dict(self._result["error"])
        yield MessageComplete(response_from_dict(self._result["response"]))

    async def aclose(self) -> None:
        return None


def _where(loop: str, child: Sequence[str]) -> dict[str, Any]:
    """The step arguments naming whose call it is: the loop, and for a child run the
    names of its children from the loop down (``"child": ["research", "web"]``)."""
    return {"loop": loop, "child": list(child)} if child else {"loop": loop}


class StepProvider:
    """Stands in for the provider ``name`` inside a workflow: ``open`` runs a
    ``model_call`` step that streams the real call to completion in a worker. ``child``:
    the names of the child run it serves, from the loop down (none: the loop's own)."""

    def __init__(
        self, name: str, dialect: str, loop: str, call: StepCall, child: Sequence[str] = ()
    ) -> None:
        self.name = name
        self.dialect = dialect
        self._where = _where(loop, child)
        self._call = call

    async def open(self, request: WireRequest) -> _RecordedStream:
        args = {
            **self._where,
            "provider": self.name,
            "request": {
                "dialect": request.dialect,
                "model": request.model,
                "payload": request.payload,
                "time_limit": request.time_limit,
            },
        }
        try:
            result = await self._call(MODEL_CALL, args)
        except StepLost as exc:
            raise ProviderError(
                ErrorCategory.TRANSIENT, f"the model call step was lost: {exc}", provider=self.name
            ) from exc
        if result.get("phase") == "open":
            raise error_from_dict(result["error"])
        return _RecordedStream(result)

    async def aclose(self) -> None:
        return None


class StepToolRunner:
    """Runs each tool call as one ``tool_call`` step (in parallel, at most
    ``params.max_parallel_tools`` at a time). No eager dispatch: the model step returns the
    whole message, so there is nothing to start early. ``child``: as for
    :class:`StepProvider`.

    An agent tool's call (``agent_tool``) runs here, in the workflow, as in process: its
    child run is a run of the workflow, whose own calls are steps."""

    def __init__(self, loop: str, call: StepCall, child: Sequence[str] = ()) -> None:
        self._where = _where(loop, child)
        self._call = call

    def prestart(self, scope: ToolScope, call: ToolUseBlock) -> None:
        return None

    async def run_calls(self, scope: ToolScope, calls: Sequence[ToolUseBlock]) -> ToolBatch:
        semaphore = asyncio.Semaphore(scope.params.max_parallel_tools)

        async def one(block: ToolUseBlock) -> ToolCallResult:
            spec = scope.params.tool(block.name)
            async with semaphore:
                if spec is not None and getattr(spec.handler, "child", None) is not None:
                    [in_place] = (await ToolRunner().run_calls(scope, [block])).results
                    return in_place
                try:
                    result = await self._call(TOOL_CALL, {**self._where, "call": block.to_dict()})
                except StepLost as exc:
                    return ToolCallResult(
                        block.id, block.name, f"tool {block.name!r} was lost: {exc}", True
                    )
            return tool_result_from_dict(result)

        tasks = [asyncio.ensure_future(one(c)) for c in calls]
        try:
            await asyncio.wait(tasks)
        except asyncio.CancelledError:  # an abort: the finished steps keep their results
            for t in tasks:
                t.cancel()
            await asyncio.wait(tasks)
            return ToolBatch(
                tuple(
                    t.result() if t.done() and not t.cancelled() else aborted_result(c)
                    for t, c in zip(tasks, calls, strict=True)
                ),
                cancelled=True,
            )
        return ToolBatch(tuple(t.result() for t in tasks))

    async def cancel_all(self) -> None:
        return None


class StepCompactor:
    """Runs a side-effecting compactor (one that calls a model to summarise) as a
    ``compaction`` step. A deterministic compactor needs no step and runs in place."""

    def __init__(self, loop: str, call: StepCall) -> None:
        self._loop = loop
        self._call = call

    async def compact(
        self, request: CompactionRequest, tokens: MessageTokenCache
    ) -> CompactionResult:
        result = await self._call(
            COMPACTION,
            {
                "loop": self._loop,
                "history": [m.to_dict() for m in request.history],
                "target_tokens": request.target_tokens,
                "reason": request.reason,
                "keep_recent": request.keep_recent,
            },
        )
        if "error" in result:
            raise RuntimeError(f"the compaction step failed: {result['error']}")
        return CompactionResult(
            tuple(message_from_dict(m) for m in result["history"]),
            result["removed"],
            result.get("summary"),
        )
