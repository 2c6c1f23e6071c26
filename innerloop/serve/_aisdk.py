"""The Vercel AI SDK's UI message stream (what ``useChat`` reads): ``POST /ai-sdk``.

The body is what ``useChat``'s default transport sends: ``{"id": CHAT_ID, "messages":
[UIMessage, ...], ...}``. The chat is a conversation (its ``id`` the conversation id): the
server keeps its history and runs the text of the last user message. The chat's token
comes back in the ``start`` part's ``messageMetadata.conversation_token``; later requests
send it as ``conversation_token`` in the body (``useChat``'s ``body`` option) or the
``X-Conversation-Token`` header.

The answer is server-sent UI message chunks, ending in ``[DONE]``:

    start                                   the answer (messageMetadata: the token)
    start-step / finish-step                each model turn
    text-start / text-delta / text-end      the model's text as it streams
    reasoning-start / -delta / -end         its thinking, where the model shows it
    tool-input-start / -delta / -available  each tool call, its input as it streams
    tool-output-available                   the tool's result (run inside the harness)
    data-state                              after each turn and at the end: state, turns,
                                            tokens, cost, exit reason, interrupt
    finish                                  the end (``abort`` first when it was aborted)

An approval inside the run ends the answer with a ``data-state`` whose ``interrupt`` lists
the calls; the chat's next request with ``innerloop_resume`` (true, false or
``{call_id: bool}``) answers it and the run goes on. Closing the stream (``stop()``)
aborts the run.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from innerloop._messages import ToolUseBlock
from innerloop._session import Session
from innerloop.events import (
    Finished,
    MessageComplete,
    ModelResponseEvent,
    RunEvent,
    TextDelta,
    ThinkingDelta,
    ToolExecuted,
    ToolInputDelta,
    ToolUseComplete,
    ToolUseStart,
    Transition,
)
from innerloop.fsm import Run
from innerloop.serve._runs import Reading, Refused, Served, event_stream, figures, wire_json

__all__ = ["ai_sdk_chat"]

HEADERS = {"x-vercel-ai-ui-message-stream": "v1"}


def _last_user_text(messages: Any) -> str:
    if not isinstance(messages, list):
        raise Refused(400, "messages: a list of UI messages is wanted")
    users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    if not users:
        raise Refused(400, "messages: a user message (or innerloop_resume) is wanted")
    parts = users[-1].get("parts")
    if not isinstance(parts, list):
        raise Refused(400, "messages[-1].parts: a list of parts is wanted")
    return "".join(
        p["text"]
        for p in parts
        if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
    )


def _start(served: Served, request: Request, body: dict[str, Any]) -> tuple[Run[Any], str, Session]:
    token = body.get("conversation_token") or request.headers.get("x-conversation-token")
    conversation = served.conversation(body.get("id"), token)
    session = conversation.session
    if "innerloop_resume" in body:
        return session.resume(body["innerloop_resume"]), conversation.token, session
    return session.start(_last_user_text(body.get("messages"))), conversation.token, session


def state(data: dict[str, Any]) -> dict[str, Any]:
    """The run's state as a data part."""
    return {"type": "data-state", "data": data}


class _Parts:
    """The run's events as UI message chunks (a text part per model turn)."""

    def __init__(self, reading: Reading) -> None:
        self.reading, self.run = reading, reading.run
        self.open: dict[str, str] = {}  # "text" / "reasoning" -> the id of the open part
        self.inputs: set[str] = set()  # the tool calls whose input this answer carried

    def _input(self, call: ToolUseBlock) -> dict[str, Any]:
        self.inputs.add(call.id)
        return {
            "type": "tool-input-available",
            "toolCallId": call.id,
            "toolName": call.name,
            "input": dict(call.input),
        }

    def _close(self, kind: str | None = None) -> list[dict[str, Any]]:
        kinds = [kind] if kind is not None else list(self.open)
        return [{"type": f"{k}-end", "id": self.open.pop(k)} for k in kinds if k in self.open]

    def _delta(self, kind: str, delta: str) -> list[dict[str, Any]]:
        out = self._close("reasoning" if kind == "text" else "text")
        if kind not in self.open:
            self.open[kind] = uuid.uuid4().hex
            out.append({"type": f"{kind}-start", "id": self.open[kind]})
        out.append({"type": f"{kind}-delta", "id": self.open[kind], "delta": delta})
        return out

    def __call__(self, event: RunEvent) -> list[dict[str, Any]]:  # noqa: C901 (one case each)
        kind = type(event)
        if kind is TextDelta:
            assert isinstance(event, TextDelta)
            return self._delta("text", event.text) if event.text else []
        if kind is ThinkingDelta:
            assert isinstance(event, ThinkingDelta)
            return self._delta("reasoning", event.thinking) if event.thinking else []
        if kind is ToolUseStart:
            assert isinstance(event, ToolUseStart)
            start = {"type": "tool-input-start", "toolCallId": event.id, "toolName": event.name}
            return [*self._close(), start]
        if kind is ToolInputDelta:
            assert isinstance(event, ToolInputDelta)
            return [
                {
                    "type": "tool-input-delta",
                    "toolCallId": event.id,
                    "inputTextDelta": event.partial_json,
                }
            ]
        if kind is ToolUseComplete:
            assert isinstance(event, ToolUseComplete)
            return [self._input(event.tool_use)]
        if kind is ToolExecuted:
            assert isinstance(event, ToolExecuted)
            output = {
                "type": "tool-output-available",
                "toolCallId": event.tool_use_id,
                "output": event.output,
            }
            if event.tool_use_id in self.inputs:
                return [output]
            # a call of an earlier answer (approved now): its input first, as useChat wants
            calls = [
                c for m in self.run.state.history for c in m.tool_uses if c.id == event.tool_use_id
            ]
            return [*(self._input(c) for c in calls[-1:]), output]
        if kind is MessageComplete:
            return self._close()
        if kind is ModelResponseEvent:
            assert isinstance(event, ModelResponseEvent)
            return [state(self.reading.figures_at(event)), {"type": "finish-step"}]
        if kind is Transition:
            assert isinstance(event, Transition)
            return [{"type": "start-step"}] if event.target == "call" else []
        return []


async def _chunks(reading: Reading, token: str) -> AsyncIterator[str]:
    run = reading.run
    yield wire_json(
        {
            "type": "start",
            "messageId": uuid.uuid4().hex,
            "messageMetadata": {"conversation_token": token},
        }
    )
    parts = _Parts(reading)
    try:
        async for event in reading:
            if type(event) is Finished:
                continue
            for part in parts(event):
                yield wire_json(part)
    except Exception as exc:  # the run raised: the stream's error part says so
        yield wire_json({"type": "error", "errorText": f"{type(exc).__name__}: {exc}"})
        return
    for part in parts._close():
        yield wire_json(part)
    yield wire_json(state(figures(run)))
    if run.state.final_state == "aborted":
        yield wire_json({"type": "abort"})
    yield wire_json({"type": "finish"})
    yield "[DONE]"


async def ai_sdk_chat(served: Served, request: Request, body: dict[str, Any]) -> Response:
    """The chat's next message (or its interrupt's answer) as a UI message stream."""
    run, token, session = _start(served, request, body)
    reading = served.read(run, session=session)
    return event_stream(_chunks(reading, token), reading, HEADERS)
