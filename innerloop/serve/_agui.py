"""AG-UI (the protocol of CopilotKit and other agent front-ends): ``POST /ag-ui``.

The body is AG-UI's ``RunAgentInput``; the answer a stream of AG-UI events (server-sent
events, the types of the ``ag-ui-protocol`` package). The thread is a conversation (its
``threadId`` the conversation id, as the OpenAI route's ``conversation_id``): the server
keeps its history and runs the last user message of ``messages``. The thread's token comes
back in ``RUN_STARTED``'s ``metadata.conversation_token``; later runs send it as
``forwardedProps.conversation_token`` (or the ``X-Conversation-Token`` header).

    RUN_STARTED                          the run began (metadata: the conversation token)
    STEP_STARTED / STEP_FINISHED         each state of the machine entered and left
    TEXT_MESSAGE_START/CONTENT/END       the model's text, as it streams
    TOOL_CALL_START/ARGS/END, _RESULT    each tool call, its input as it streams, its result
    STATE_SNAPSHOT                       after each model turn and at the end: state,
                                         turns, tokens, cost
    RUN_FINISHED                         outcome success (result: the answer or typed
                                         output), interrupt (an approval: answer it with
                                         ``resume``), or cancelled (the run was aborted)
    RUN_ERROR                            the run raised

An approval inside the run ends it with an interrupt outcome; the next run on the thread
with ``resume: [{interruptId, status: "resolved", payload: true}]`` (or false, or
``{call_id: bool}``; ``"cancelled"`` denies) goes on. A client that closes the stream (an
abort) aborts the run: its history stays valid and stored.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

from ag_ui import core as agui
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import Response

from innerloop._session import Session
from innerloop.events import (
    Finished,
    MessageComplete,
    ModelResponseEvent,
    RunEvent,
    RunStarted,
    TextDelta,
    ToolExecuted,
    ToolInputDelta,
    ToolUseComplete,
    ToolUseStart,
    Transition,
)
from innerloop.fsm import HarnessState, Interrupt, Run
from innerloop.serve._runs import (
    Reading,
    Refused,
    Served,
    answer_of,
    event_stream,
    figures,
    question,
    wire_json,
)

__all__ = ["ag_ui_run"]


def _text(message: Any) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return "".join(getattr(part, "text", "") for part in content)


def _input(body: dict[str, Any]) -> agui.RunAgentInput:
    try:
        return agui.RunAgentInput.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise Refused(400, f"not an AG-UI RunAgentInput: {where}: {first['msg']}") from None


def _interrupt_id(thread: str, interrupt: Interrupt) -> str:
    return f"{thread}:{interrupt.state}:{','.join(interrupt.tool_use_ids) or interrupt.kind}"


def _answer(entries: list[agui.ResumeEntry], expected: str, interrupt: Interrupt) -> Any:
    """The answer the ``resume`` entries give the pending interrupt."""
    for entry in entries:
        if entry.interrupt_id == expected:
            if entry.status == "cancelled":
                return False if interrupt.kind == "approval" else None
            return entry.payload
    raise Refused(409, f"resume names no pending interrupt; the thread waits on {expected!r}")


def _start(
    served: Served, request: Request, run_input: agui.RunAgentInput
) -> tuple[Run[Any], str, Session]:
    props = run_input.forwarded_props if isinstance(run_input.forwarded_props, dict) else {}
    token = props.get("conversation_token") or request.headers.get("x-conversation-token")
    conversation = served.conversation(run_input.thread_id, token)
    session = conversation.session
    if run_input.resume:
        state = session.state
        if state is None or state.interrupt is None or state.final_state != "suspended":
            raise Refused(
                409,
                f"thread {run_input.thread_id!r} waits on no interrupt: "
                "send a user message instead of resume",
            )
        expected = _interrupt_id(run_input.thread_id, state.interrupt)
        return (
            session.resume(_answer(run_input.resume, expected, state.interrupt)),
            conversation.token,
            session,
        )
    users = [m for m in run_input.messages if m.role == "user"]
    if not users:
        raise Refused(400, "messages: a user message (or resume) is wanted")
    return session.start(_text(users[-1])), conversation.token, session


def _wire(kind: str, **fields: Any) -> dict[str, Any]:
    """The AG-UI event ``kind`` as it goes on the wire: its fields named in camelCase, in
    the order of the ag-ui-protocol package's model, those without a value left out (as
    the model leaves them out). Every event is made so and written by :func:`wire_json`
    (pydantic-core's encoder, the one the package's models write with): the same bytes as
    ``ag_ui.encoder.EventEncoder`` gives for the model (tests/serve/test_agui.py checks
    them), without the package's cost: building and dumping a model took 7 to 11
    microseconds an event, ``json.dumps`` of the others 3 to 5, pydantic-core's encoder
    well under 1; a short run's stream (twenty events) took the app, called in process,
    0.54 to 0.77 ms (median) with them, 0.40 without."""
    return {"type": kind} | {key: value for key, value in fields.items() if value is not None}


def _snapshot(data: dict[str, Any]) -> dict[str, Any]:
    keys = ("state", "turns", "tokens", "cost_usd", "exit_reason")
    return _wire("STATE_SNAPSHOT", snapshot={key: data[key] for key in keys})


def _finished(thread: str, run_id: str, state: HarnessState[Any]) -> dict[str, Any]:
    interrupt = state.interrupt
    outcome: dict[str, Any]
    if state.final_state == "suspended" and interrupt is not None:
        pending = {
            "id": _interrupt_id(thread, interrupt),
            "reason": interrupt.kind,
            "message": question(interrupt),
            "toolCallId": interrupt.tool_use_ids[0] if interrupt.tool_use_ids else None,
            "metadata": {"payload": interrupt.payload},
        }
        outcome = {
            "type": "interrupt",
            "interrupts": [{k: v for k, v in pending.items() if v is not None}],
        }
    elif state.final_state == "aborted":
        outcome = {"type": "cancelled"}
    else:
        outcome = {"type": "success"}
    result = state.output_data if state.output_data is not None else answer_of(state)
    return _wire("RUN_FINISHED", threadId=thread, runId=run_id, result=result, outcome=outcome)


class _Translate:
    """The run's events as AG-UI events (a text message per model turn)."""

    def __init__(self, reading: Reading) -> None:
        self.reading = reading
        self.message: str | None = None

    def _end_text(self) -> list[dict[str, Any]]:
        if self.message is None:
            return []
        ended, self.message = self.message, None
        return [_wire("TEXT_MESSAGE_END", messageId=ended)]

    def __call__(self, event: RunEvent) -> list[dict[str, Any]]:  # noqa: C901 (one case each)
        kind = type(event)
        if kind is TextDelta:
            assert isinstance(event, TextDelta)
            out: list[dict[str, Any]] = []
            if self.message is None:
                self.message = uuid.uuid4().hex
                out.append(_wire("TEXT_MESSAGE_START", messageId=self.message, role="assistant"))
            if event.text:
                out.append(_wire("TEXT_MESSAGE_CONTENT", messageId=self.message, delta=event.text))
            return out
        if kind is ToolUseStart:
            assert isinstance(event, ToolUseStart)
            return [
                *self._end_text(),
                _wire("TOOL_CALL_START", toolCallId=event.id, toolCallName=event.name),
            ]
        if kind is ToolInputDelta:
            assert isinstance(event, ToolInputDelta)
            return [_wire("TOOL_CALL_ARGS", toolCallId=event.id, delta=event.partial_json)]
        if kind is ToolUseComplete:
            assert isinstance(event, ToolUseComplete)
            return [_wire("TOOL_CALL_END", toolCallId=event.tool_use.id)]
        if kind is ToolExecuted:
            assert isinstance(event, ToolExecuted)
            return [
                _wire(
                    "TOOL_CALL_RESULT",
                    messageId=uuid.uuid4().hex,
                    toolCallId=event.tool_use_id,
                    content=event.output,
                    role="tool",
                )
            ]
        if kind is MessageComplete:
            return self._end_text()
        if kind is ModelResponseEvent:
            assert isinstance(event, ModelResponseEvent)
            return [_snapshot(self.reading.figures_at(event))]
        if kind is RunStarted:
            assert isinstance(event, RunStarted)
            return [_wire("STEP_STARTED", stepName=event.state)]
        if kind is Transition:
            assert isinstance(event, Transition)
            return [
                _wire("STEP_FINISHED", stepName=event.source),
                _wire("STEP_STARTED", stepName=event.target),
            ]
        return []


async def _events(
    reading: Reading, run_input: agui.RunAgentInput, token: str
) -> AsyncIterator[str]:
    run = reading.run
    thread, run_id = run_input.thread_id, run_input.run_id
    started = _wire(
        "RUN_STARTED", metadata={"conversation_token": token}, threadId=thread, runId=run_id
    )
    yield wire_json(started)
    translate = _Translate(reading)
    try:
        async for event in reading:
            if type(event) is Finished:
                for out in translate._end_text():
                    yield wire_json(out)
                yield wire_json(_wire("STEP_FINISHED", stepName=run.current))
                continue
            for out in translate(event):
                yield wire_json(out)
    except Exception as exc:  # the run raised: say so in AG-UI's terms
        yield wire_json(_wire("RUN_ERROR", message=f"{type(exc).__name__}: {exc}"))
        return
    yield wire_json(_snapshot(figures(run)))
    yield wire_json(_finished(thread, run_id, run.state))


async def ag_ui_run(served: Served, request: Request, body: dict[str, Any]) -> Response:
    """Run the thread's next message (or resume its interrupt); AG-UI events back."""
    run_input = _input(body)
    run, token, session = _start(served, request, run_input)
    reading = served.read(run, session=session)
    return event_stream(_events(reading, run_input, token), reading)
