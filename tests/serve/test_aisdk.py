"""The Vercel AI SDK's UI message stream at /ai-sdk, read by the ``ai`` package the way
``useChat`` reads it (its DefaultChatTransport and readUIMessageStream, under node)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from innerloop.examples.approval import with_approval
from innerloop.testing import assert_valid_history, reply
from tests.serve.conftest import (
    ended,
    harness,
    leave_at,
    run_node,
    waiting_harness,
    weather_script,
)


def chat(
    folder: Path, server: Any, chat_id: str, text: str, abort: bool = False, **body: Any
) -> dict[str, Any]:
    """The assistant's UI message, as useChat would hold it after the request (with
    ``abort``, the request aborted once a tool call's input has arrived)."""
    messages = [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": text}]}]
    request = {"chatId": chat_id, "messages": messages, "body": body, "abortOnToolInput": abort}
    [message] = run_node(
        folder, "ai_sdk_chat.mjs", f"{server.base_url}/ai-sdk", json.dumps(request)
    )
    return dict(message)


def parts(message: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [p for p in message["parts"] if p["type"] == kind]


def test_use_chat_sees_the_text_the_tool_call_and_the_state(serve: Any, node_clients: Path) -> None:
    """Text parts, the tool call with its input and output, data-state parts."""
    message = chat(node_clients, serve(harness(*weather_script())), "c1", "Weather in Lisbon?")
    assert message["role"] == "assistant"
    assert [p["text"] for p in parts(message, "text")] == ["Sunny in Lisbon."]
    [call] = parts(message, "tool-weather")
    assert (call["state"], call["input"], call["output"]) == (
        "output-available",
        {"city": "Lisbon"},
        "sunny in Lisbon",
    )
    states = [p["data"] for p in parts(message, "data-state")]
    assert states[-1]["exit_reason"] == "model_complete"
    assert states[-1]["turns"] == 2
    # each turn's state as it was then (the run went on while the stream was written)
    assert [(s["turns"], s["exit_reason"]) for s in states[:2]] == [(1, None), (2, None)]
    assert len(message["metadata"]["conversation_token"]) == 32


def test_a_chat_goes_on_and_answers_an_approval(serve: Any, node_clients: Path) -> None:
    """The chat's approval is in its data-state; innerloop_resume answers it."""
    server = serve(harness(*weather_script(), machine=with_approval()))
    asked = chat(node_clients, server, "c2", "Weather?")
    interrupt = parts(asked, "data-state")[-1]["data"]["interrupt"]
    assert interrupt["kind"] == "approval"
    assert interrupt["payload"]["calls"][0]["name"] == "weather"
    token = asked["metadata"]["conversation_token"]
    done = chat(node_clients, server, "c2", "", conversation_token=token, innerloop_resume=True)
    assert [p["text"] for p in parts(done, "text")] == ["Sunny in Lisbon."]


def test_a_chat_without_its_token_is_refused(serve: Any) -> None:
    """The chat id is a conversation: someone else's wants its token (403)."""
    server = serve(harness(reply("Hi.")))
    body = {
        "id": "c3",
        "messages": [{"id": "u", "role": "user", "parts": [{"type": "text", "text": "Hi"}]}],
    }
    with httpx.Client(base_url=server.base_url) as c:
        first = c.post("/ai-sdk", json=body)
        again = c.post("/ai-sdk", json=body)
    assert first.headers["x-vercel-ai-ui-message-stream"] == "v1"
    assert again.status_code == 403


def test_stop_aborts_the_run(serve: Any, tmp_path: Path) -> None:
    """useChat's stop() closes the stream: the run is aborted, valid and stored."""
    h = waiting_harness(tmp_path / "s.db")
    server = serve(h)
    body = {
        "id": "c4",
        "messages": [{"id": "u", "role": "user", "parts": [{"type": "text", "text": "Wait"}]}],
    }
    state = leave_at(server, "/ai-sdk", body, '"tool-input-available"', "c4", h)
    assert state.final_state == "aborted"
    assert_valid_history(state.history)


def test_the_ai_sdk_client_aborts_a_run(serve: Any, node_clients: Path, tmp_path: Path) -> None:
    """The ai package's request aborted by its AbortController (useChat's stop()) once
    the tool call's input arrived: the server aborts the run, valid and stored, and the
    chat takes its next message."""
    h = waiting_harness(tmp_path / "s.db")
    server = serve(h)
    message = chat(node_clients, server, "c5", "Wait", abort=True)
    assert message["aborted"] is True
    [call] = parts(message, "tool-wait_forever")
    assert (call["state"], call["input"]) == ("input-available", {"reason": "test"})
    state = ended(h, "c5")
    assert state.final_state == "aborted"
    assert state.abort is not None
    assert state.abort.reason == "the client went away"
    assert_valid_history(state.history)
