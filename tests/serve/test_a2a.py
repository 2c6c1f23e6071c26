"""A2A at /a2a, driven by the official a2a-sdk client: the agent card, a task that runs a
tool and completes with the answer, input-required for an approval, a cancelled task."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from a2a.client import ClientConfig, create_client
from a2a.helpers.proto_helpers import (
    get_artifact_text,
    get_data_parts,
    get_message_text,
    new_text_message,
)
from a2a.types import CancelTaskRequest, GetTaskRequest, Role, SendMessageRequest, TaskState

from innerloop.examples.approval import with_approval
from innerloop.testing import assert_valid_history, reply
from tests.serve.conftest import ended, harness, sent, waiting_harness, weather_script


async def send(url: str, text: str, **ids: str) -> list[Any]:
    """The status updates of one message's task (the client resolves the agent card)."""
    client = await create_client(url, ClientConfig(streaming=True))
    try:
        message = new_text_message(text, role=Role.ROLE_USER, **ids)
        request = SendMessageRequest(message=message)
        return [
            r.status_update
            async for r in client.send_message(request)
            if r.HasField("status_update")
        ]
    finally:
        await client.close()


async def answer(url: str, task_id: str) -> str:
    client = await create_client(url)
    try:
        task = await client.get_task(GetTaskRequest(id=task_id))
    finally:
        await client.close()
    return get_artifact_text(task.artifacts[0])


async def test_a_task_runs_the_agent_and_completes_with_its_answer(serve: Any) -> None:
    """Working while the run goes on (its text, the tool call and its result as status
    messages), then the answer."""
    url = f"{serve(harness(*weather_script()), name='weather').base_url}/a2a"
    updates = await send(url, "Weather in Lisbon?")
    states = [u.status.state for u in updates]
    assert states[0] == TaskState.TASK_STATE_WORKING
    assert states[-1] == TaskState.TASK_STATE_COMPLETED
    streamed = "".join(
        get_message_text(u.status.message) for u in updates[:-1] if u.status.HasField("message")
    )
    assert streamed == "Sunny in Lisbon."
    tools = [data for u in updates for data in get_data_parts(u.status.message.parts)]
    call_id = tools[0]["toolCall"]["id"]
    assert tools == [
        {"toolCall": {"id": call_id, "name": "weather", "input": {"city": "Lisbon"}}},
        {
            "toolResult": {
                "id": call_id,
                "name": "weather",
                "output": "sunny in Lisbon",
                "isError": False,
            }
        },
    ]
    assert await answer(url, updates[-1].task_id) == "Sunny in Lisbon."


async def test_an_approval_is_input_required(serve: Any) -> None:
    """The run's approval asks for input; the next message on the task answers it."""
    url = f"{serve(harness(*weather_script(), machine=with_approval())).base_url}/a2a"
    asked = await send(url, "Weather?")
    last = asked[-1]
    assert last.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert get_message_text(last.status.message) == (
        'The agent asks to run: weather({"city": "Lisbon"}). Approve?'
    )
    done = await send(url, "yes", task_id=last.task_id, context_id=last.context_id)
    assert done[-1].status.state == TaskState.TASK_STATE_COMPLETED
    assert await answer(url, last.task_id) == "Sunny in Lisbon."


async def test_cancelling_the_task_aborts_the_run(serve: Any, tmp_path: Path) -> None:
    """tasks/cancel aborts the run: valid history, stored as conversation a2a:CONTEXT."""
    h = waiting_harness(tmp_path / "s.db")
    url = f"{serve(h).base_url}/a2a"
    client = await create_client(url, ClientConfig(streaming=True))
    try:
        message = new_text_message("Wait.", role=Role.ROLE_USER)
        stream = client.send_message(SendMessageRequest(message=message))
        first = await anext(aiter(stream))
        while not first.HasField("status_update"):
            first = await anext(aiter(stream))
        task_id, context_id = first.status_update.task_id, first.status_update.context_id
        cancelled = await client.cancel_task(CancelTaskRequest(id=task_id))
        await asyncio.wait_for(stream.aclose(), 10)  # type: ignore[attr-defined]
    finally:
        await client.close()
    assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
    state = await asyncio.to_thread(ended, h, f"a2a:{context_id}")
    assert state.final_state == "aborted"
    assert_valid_history(state.history)


async def test_a_context_never_continues_another_protocols_conversation(serve: Any) -> None:
    """contextId 'chat-1' is conversation a2a:chat-1, not the OpenAI client's chat-1."""
    import httpx

    h = harness(reply("Hello Ana."), reply("I do not know you."))
    server = serve(h)
    async with httpx.AsyncClient(base_url=server.base_url) as c:
        first = await c.post(
            "/v1/chat/completions",
            json={
                "model": "m",
                "messages": [{"role": "user", "content": "I am Ana."}],
                "conversation_id": "chat-1",
            },
        )
    assert first.status_code == 200
    updates = await send(f"{server.base_url}/a2a", "Who am I?", context_id="chat-1")
    assert updates[-1].status.state == TaskState.TASK_STATE_COMPLETED
    assert sent(h) == ["Who am I?"]
