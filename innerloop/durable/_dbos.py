"""DBOS adapter: a DBOS workflow drives the machine, the steps are DBOS steps.

DBOS records each step's output in its system database (SQLite by default, PostgreSQL for
several processes). After a crash, a worker started with the same executor id recovers its
unfinished workflows: the workflow function runs again from the top, completed steps
return their recorded outputs and the step that was running runs again. DBOS does not
notice a dead worker by itself; restart it (or run one worker per executor id under a
supervisor).

As with Temporal, steps never retry on their own (``retries_allowed=False``): a failed
model call is a recorded step *result* that the machine's recovery branches route. Backoff
sleeps are durable (``DBOS.sleep_async``). Events go to the DBOS stream ``events`` of the
workflow; an ``abort`` message sent to the workflow takes effect at the next turn boundary.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import attrs
from dbos import DBOS, DBOSClient, EnqueueOptions

from innerloop._events import Transition
from innerloop.durable._app import LoopApp, loop_input
from innerloop.durable._codec import state_from_dict, state_to_dict
from innerloop.durable._steps import COMPACTION, MODEL_CALL, TOOL_CALL
from innerloop.fsm._state import HarnessState

__all__ = ["DBOSClock", "DBOSLoopClient", "DBOSLoops", "dbos_config"]

WORKFLOW_NAME = "innerloop.loop"
EVENTS = "events"
ABORT = "abort"


class DBOSClock:
    """Durable sleeps: a backoff survives a restart of the process."""

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await DBOS.sleep_async(max(seconds, 0.0))


def dbos_config(database_url: str, *, name: str = "innerloop", **extra: Any) -> Any:
    """A DBOS config for ``database_url`` (``sqlite:///path`` or ``postgresql://...``)."""
    return {"name": name, "system_database_url": database_url, **extra}


class DBOSLoops:
    """Registers ``app``'s loop workflow and its three steps with DBOS. Create it once per
    process, before ``DBOS.launch()``; after it, :meth:`listen` takes loops from the queue
    ``queue``."""

    def __init__(
        self,
        app: LoopApp,
        *,
        queue: str = "innerloop",
        continue_at: Sequence[str] = ("assemble",),
    ) -> None:
        self.app = app
        self.queue = queue
        steps = {name: self._step(app, name) for name in (MODEL_CALL, TOOL_CALL, COMPACTION)}

        async def call(name: str, args: dict[str, Any]) -> dict[str, Any]:
            return await steps[name](args)

        @DBOS.workflow(name=WORKFLOW_NAME)
        async def loop_workflow(start: dict[str, Any]) -> dict[str, Any]:
            run = app.start_run(start, call, DBOSClock())
            async for event in run.events():
                await DBOS.write_stream_async(EVENTS, event.to_dict())
                if isinstance(event, Transition) and event.target in continue_at:
                    reason = await DBOS.recv_async(ABORT, timeout_seconds=0)
                    if reason is not None:
                        run.abort(str(reason))
            await DBOS.close_stream_async(EVENTS)
            return state_to_dict(run.state)

        self.workflow = loop_workflow

    def listen(self) -> None:
        """Take loops from the queue; call after ``DBOS.launch()``."""
        DBOS.register_queue(self.queue)

    @staticmethod
    def _step(app: LoopApp, name: str) -> Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]:
        @DBOS.step(name=f"innerloop.{name}", retries_allowed=False)
        async def step(args: dict[str, Any]) -> dict[str, Any]:
            return await app.execute(name, args)

        return step


@attrs.frozen
class DBOSLoopClient:
    """The host's side, from any process: start loops, read their events, abort them."""

    client: DBOSClient
    queue: str = "innerloop"

    async def start(
        self, loop: str, prompt: str | None = None, *, id: str, tasks: Sequence[str] = ()
    ) -> None:
        options: EnqueueOptions = {
            "workflow_name": WORKFLOW_NAME,
            "queue_name": self.queue,
            "workflow_id": id,
        }
        await self.client.enqueue_async(options, loop_input(loop, prompt, tasks=tasks))

    async def result(self, id: str) -> HarnessState:
        handle: Any = await self.client.retrieve_workflow_async(id)
        return state_from_dict(await handle.get_result())

    async def events(self, id: str) -> AsyncIterator[dict[str, Any]]:
        async for event in self.client.read_stream_async(id, EVENTS):
            yield event

    async def abort(self, id: str, reason: str = "abort requested by the host") -> None:
        await self.client.send_async(id, reason, ABORT)
