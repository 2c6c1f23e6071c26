"""A2A (the ``a2a-sdk`` server): the served harness as an agent other agents call, at
``/a2a`` (JSON-RPC) with its agent card at ``/a2a/.well-known/agent-card.json``.

A message is a task; its ``contextId`` is a conversation of the harness (``a2a:CONTEXT``:
the server keeps its history; a new context is a new conversation). The task works while
the run goes on (the model's text as status messages), completes with the answer as an
artifact, fails when the run ends without one, and asks for input (``input-required``)
when the run waits for an approval: the next message on that task answers it (``yes`` or
``no``, or a data part ``{"approve": bool}`` or ``{call_id: bool}``). Cancelling the task
aborts the run.
"""

from __future__ import annotations

from typing import Any

from a2a.helpers.proto_helpers import (
    get_data_parts,
    new_task_from_user_message,
    new_text_artifact,
    new_text_message,
)
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes.agent_card_routes import create_agent_card_routes
from a2a.server.routes.jsonrpc_routes import create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, TaskState
from starlette.routing import BaseRoute

from innerloop.events import TextDelta
from innerloop.fsm import Run
from innerloop.serve._runs import Served, answer_of, question

__all__ = ["a2a_routes"]

CONTEXT_PREFIX = "a2a:"
"""A context's conversation id is its contextId under this prefix: no A2A message can go
on with a conversation another protocol's client holds (that one wants its token)."""
YES = frozenset({"yes", "y", "true", "approve", "approved", "ok"})


def _approval(context: RequestContext) -> Any:
    """The answer an input-required task's next message gives."""
    message = context.message
    if message is not None:
        for data in get_data_parts(list(message.parts)):
            if isinstance(data, dict):
                return data.get("approve", data)
    return context.get_user_input().strip().lower() in YES


class _Executor(AgentExecutor):
    def __init__(self, served: Served) -> None:
        self.served = served
        self.runs: dict[str, Run[Any]] = {}

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id, context_id = context.task_id or "", context.context_id or ""
        updater = TaskUpdater(event_queue, task_id, context_id)
        session = self.served.session(f"{CONTEXT_PREFIX}{context_id}")
        if context.current_task is None:
            assert context.message is not None
            await event_queue.enqueue_event(new_task_from_user_message(context.message))
            run = session.start(context.get_user_input())
        else:
            run = session.resume(_approval(context))
        self.runs[task_id] = run
        try:
            with self.served.read(run, session=session) as reading:
                await updater.start_work()
                async for event in reading:
                    if type(event) is TextDelta and event.text:
                        await updater.update_status(
                            TaskState.TASK_STATE_WORKING,
                            new_text_message(event.text, context_id=context_id, task_id=task_id),
                        )
        finally:
            self.runs.pop(task_id, None)
        state = run.state
        if state.final_state == "suspended" and state.interrupt is not None:
            ask = new_text_message(
                question(state.interrupt), context_id=context_id, task_id=task_id
            )
            await updater.requires_input(ask)
            return
        if state.exit_reason == "model_complete" or state.output_data is not None:
            await event_queue.enqueue_event(_artifact(task_id, context_id, answer_of(state)))
            await updater.complete()
            return
        ended = new_text_message(answer_of(state), context_id=context_id, task_id=task_id)
        if state.final_state == "aborted":
            await updater.cancel(ended)
        else:
            await updater.failed(ended)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        run = self.runs.get(context.task_id or "")
        if run is not None:
            run.abort("the A2A task was cancelled")
        updater = TaskUpdater(event_queue, context.task_id or "", context.context_id or "")
        await updater.cancel()


def _artifact(task_id: str, context_id: str, text: str) -> Any:
    from a2a.types import TaskArtifactUpdateEvent

    return TaskArtifactUpdateEvent(
        task_id=task_id,
        context_id=context_id,
        artifact=new_text_artifact(name="answer", text=text),
        last_chunk=True,
    )


def a2a_routes(served: Served, name: str, url: str) -> list[BaseRoute]:
    """The agent card and the JSON-RPC endpoint (``url``: where clients reach ``/a2a``)."""
    card = AgentCard(
        name=name,
        description=f"The innerloop agent {name!r}: a message in, its answer out.",
        version="1",
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0")
        ],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id=name, name=name, description="Ask the agent.", tags=["agent"])],
    )
    handler = DefaultRequestHandler(_Executor(served), InMemoryTaskStore(), card)
    routes: list[BaseRoute] = [
        *create_agent_card_routes(card, card_url="/a2a/.well-known/agent-card.json"),
        *create_jsonrpc_routes(handler, "/a2a"),
    ]
    return routes
