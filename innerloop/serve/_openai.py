"""OpenAI-compatible chat completions: ``POST /v1/chat/completions``.

The request's ``messages`` are the conversation (as OpenAI's API takes them) unless the
request names a ``conversation_id``: then the server keeps the history (a session of the
harness) and only the last user message is sent. Extensions, in the request body (the
OpenAI SDK sends them with ``extra_body=``):

    conversation_id       str   continue (or start) this conversation on the server
    conversation_token    str   the token its first answer carried (wanted from then on)
    innerloop_events      bool  also send the run's events (each as the event log writes it)
    innerloop_resume      any   the answer to the conversation's pending interrupt (an
                                approval: true, false or {call_id: bool}); no message runs

and in the answer: ``conversation_id`` and ``conversation_token`` (top level, in every
chunk when streaming) and ``innerloop`` (``exit_reason``, ``final_state``, ``interrupt``,
``output``, and ``events`` when asked; streaming: chunks with no choices carry each event
as ``innerloop_event``, the last chunk ``innerloop``).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from innerloop._messages import Message
from innerloop._session import Session
from innerloop.events import Finished, TextDelta
from innerloop.fsm import HarnessState, Run
from innerloop.serve._runs import (
    Reading,
    Refused,
    Served,
    answer_of,
    event_json,
    event_stream,
    summary,
    wire_json,
)

__all__ = ["chat_completions"]

ROLES = {"user": Message.user, "assistant": Message.assistant}


def _text(message: Any, at: int) -> str:
    """The text of message ``at`` (a string, or a list of text parts)."""
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
        isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
        for p in content
    ):
        return "".join(p["text"] for p in content)
    raise Refused(400, f"messages[{at}].content: a string or a list of text parts is served")


def _history(messages: Any) -> tuple[list[Message], str]:
    """The request's earlier user and assistant messages, and its last (user) message's
    text; system messages are left out (the harness has its own system prompt)."""
    if not isinstance(messages, list) or not messages:
        raise Refused(400, "messages: a non-empty list of {role, content} objects is wanted")
    last = messages[-1]
    if not isinstance(last, dict) or last.get("role") != "user":
        raise Refused(400, "messages: the last message must be the user's (role 'user')")
    history = []
    for at, message in enumerate(messages[:-1]):
        role = message.get("role") if isinstance(message, dict) else None
        if role in ("system", "developer"):
            continue
        if role not in ROLES:
            raise Refused(
                400,
                f"messages[{at}].role: user, assistant or system is served, not {role!r}"
                " (tool calls run inside the served harness)",
            )
        history.append(ROLES[role](_text(message, at)))
    return history, _text(last, len(messages) - 1)


def _start(served: Served, body: dict[str, Any]) -> tuple[Run[Any], dict[str, Any], Session | None]:
    """The run the request asks for, the answer's conversation fields, its conversation."""
    if body.get("tools"):
        raise Refused(400, "tools: the served harness runs its own tools; send none")
    if "conversation_id" not in body:
        if "innerloop_resume" in body:
            raise Refused(
                400,
                "innerloop_resume answers a conversation: send its "
                "conversation_id and conversation_token too",
            )
        history, text = _history(body.get("messages"))
        return served.harness.start(text, state=HarnessState(history=history)), {}, None
    conversation = served.conversation(body["conversation_id"], body.get("conversation_token"))
    fields = {
        "conversation_id": conversation.session.conversation_id,
        "conversation_token": conversation.token,
    }
    session: Session = conversation.session
    if "innerloop_resume" in body:
        return session.resume(body["innerloop_resume"]), fields, session
    return session.start(_history(body.get("messages"))[1]), fields, session


def _usage(state: HarnessState[Any]) -> dict[str, int]:
    """The conversation's tokens so far."""
    prompt = state.usage.input_tokens
    completion = state.usage.output_tokens
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def _finish_reason(state: HarnessState[Any]) -> str:
    return "length" if state.exit_reason in ("max_turns_exceeded", "budget_exceeded") else "stop"


async def chat_completions(served: Served, request: Request, body: dict[str, Any]) -> Response:
    """Run the request's message on the served harness; the answer as OpenAI's API gives
    it, streamed (``stream: true``, server-sent events) or whole."""
    run, fields, session = _start(served, body)
    model = body.get("model") if isinstance(body.get("model"), str) else "innerloop"
    head = {"id": f"chatcmpl-{uuid.uuid4().hex}", "created": int(time.time()), "model": model}
    head.update(fields)
    asked = bool(body.get("innerloop_events"))
    stream = bool(body.get("stream"))
    reading = served.read(run, events=stream or asked, session=session)
    if stream:
        return event_stream(_chunks(reading, head, asked), reading)
    events = [event_json(event) async for event in reading]
    state = run.state
    extension = summary(state) | ({"events": events} if asked else {})
    message = {"role": "assistant", "content": answer_of(state)}
    choice = {"index": 0, "message": message, "finish_reason": _finish_reason(state)}
    return JSONResponse(
        head
        | {
            "object": "chat.completion",
            "choices": [choice],
            "usage": _usage(state),
            "innerloop": extension,
        }
    )


async def _chunks(reading: Reading, head: dict[str, Any], with_events: bool) -> AsyncIterator[str]:
    run = reading.run
    head = head | {"object": "chat.completion.chunk"}

    def chunk(delta: dict[str, Any] | None, **extra: Any) -> str:
        choices = (
            []
            if delta is None
            else [{"index": 0, "delta": delta, "finish_reason": extra.pop("finish_reason", None)}]
        )
        return wire_json(head | {"choices": choices} | extra)

    yield chunk({"role": "assistant", "content": ""})
    wrote = False
    async for event in reading:
        if with_events:
            yield chunk(None, innerloop_event=event_json(event))
        if type(event) is TextDelta and event.text:
            wrote = True
            yield chunk({"content": event.text})
        elif type(event) is Finished and not (
            wrote and run.state.exit_reason == "model_complete" and run.state.output_data is None
        ):
            yield chunk({"content": answer_of(run.state)})
    state = run.state
    yield chunk(
        {}, finish_reason=_finish_reason(state), usage=_usage(state), innerloop=summary(state)
    )
    yield "[DONE]"
