"""AG-UI at /ag-ui: each event of the stream parsed with the ag-ui-protocol package's types."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pydantic
from ag_ui import core as agui
from ag_ui.encoder import EventEncoder

from innerloop.examples.approval import with_approval
from innerloop.fsm import HarnessState, Interrupt
from innerloop.serve._agui import _finished, _snapshot, _wire
from innerloop.serve._runs import question, wire_json
from innerloop.testing import assert_valid_history, reply
from tests.serve.conftest import ended, harness, leave_at, run_node, waiting_harness, weather_script

EVENTS: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(agui.Event)


def run_input(thread: str, text: str | None = None, **more: Any) -> dict[str, Any]:
    messages = [] if text is None else [{"id": "m1", "role": "user", "content": text}]
    return {
        "threadId": thread,
        "runId": "r1",
        "state": {},
        "messages": messages,
        "tools": [],
        "context": [],
        "forwardedProps": {},
    } | more


def stream(server: Any, body: dict[str, Any]) -> list[Any]:
    """The events of one run, each validated as its AG-UI type, and each written as
    ag-ui-protocol's own encoder writes that event (the server writes them directly)."""
    with httpx.Client(base_url=server.base_url) as c, c.stream("POST", "/ag-ui", json=body) as r:
        assert r.status_code == 200, r.read()
        lines = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    events = [EVENTS.validate_json(line) for line in lines]
    for line, event in zip(lines, events, strict=True):
        assert EventEncoder().encode(event) == f"data: {line}\n\n"
    return events


def kinds(events: list[Any]) -> list[str]:
    return [e.type.value for e in events if not e.type.value.startswith("STEP_")]


def test_a_run_streams_text_tool_calls_and_state(serve: Any) -> None:
    """Run, text and tool call events, a state snapshot; the result in RUN_FINISHED."""
    events = stream(serve(harness(*weather_script())), run_input("t1", "Weather in Lisbon?"))
    assert kinds(events) == [
        "RUN_STARTED",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "STATE_SNAPSHOT",
        "TOOL_CALL_RESULT",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "STATE_SNAPSHOT",
        "STATE_SNAPSHOT",
        "RUN_FINISHED",
    ]
    result = events[-1]
    assert (result.result, result.outcome.type) == ("Sunny in Lisbon.", "success")
    args = "".join(e.delta for e in events if e.type.value == "TOOL_CALL_ARGS")
    assert json.loads(args) == {"city": "Lisbon"}
    calls = [e for e in events if e.type.value == "TOOL_CALL_RESULT"]
    assert calls[0].content == "sunny in Lisbon"
    steps = [e.step_name for e in events if e.type.value == "STEP_STARTED"]
    assert steps[:3] == ["idle", "assemble", "normalize"]
    assert steps[-1] == "model_complete"
    assert events[-2].snapshot["turns"] == 2
    turns = [e.snapshot for e in events if e.type.value == "STATE_SNAPSHOT"][:2]
    assert [(s["turns"], s["exit_reason"]) for s in turns] == [(1, None), (2, None)]


def test_an_approval_is_an_interrupt_answered_by_resume(serve: Any) -> None:
    """RUN_FINISHED's interrupt outcome; AG-UI's resume answers it and the run goes on."""
    server = serve(harness(*weather_script(), machine=with_approval()))
    first = stream(server, run_input("t2", "Weather?"))
    outcome = first[-1].outcome
    assert outcome.type == "interrupt"
    interrupt = outcome.interrupts[0]
    assert interrupt.reason == "approval"
    assert interrupt.metadata["payload"]["calls"][0]["name"] == "weather"
    token = first[0].metadata["conversation_token"]
    resume = [{"interruptId": interrupt.id, "status": "resolved", "payload": True}]
    second = stream(
        server, run_input("t2", forwardedProps={"conversation_token": token}, resume=resume)
    )
    assert (second[-1].result, second[-1].outcome.type) == ("Sunny in Lisbon.", "success")


def test_a_thread_goes_on_with_its_token_only(serve: Any) -> None:
    """The thread is a conversation: a second run without the token is a 403."""
    h = harness(reply("Hello Ana."), reply("You are Ana."))
    server = serve(h)
    first = stream(server, run_input("t3", "I am Ana."))
    with httpx.Client(base_url=server.base_url) as c:
        refused = c.post("/ag-ui", json=run_input("t3", "Who am I?"))
        bad = c.post("/ag-ui", json={"threadId": "t"})
    assert refused.status_code == 403
    assert bad.status_code == 400
    assert bad.json()["error"]["message"].startswith("not an AG-UI RunAgentInput: runId")
    token = first[0].metadata["conversation_token"]
    second = stream(
        server, run_input("t3", "Who am I?") | {"forwardedProps": {"conversation_token": token}}
    )
    assert second[-1].result == "You are Ana."


def test_closing_the_stream_aborts_the_run(serve: Any, tmp_path: Path) -> None:
    """AG-UI's abort (the client closes the stream) aborts the run; it stays valid, stored."""
    h = waiting_harness(tmp_path / "s.db")
    server = serve(h)
    state = leave_at(server, "/ag-ui", run_input("t4", "Wait."), '"TOOL_CALL_END"', "t4", h)
    assert state.final_state == "aborted"
    assert_valid_history(state.history)


def node_run(folder: Path, server: Any, mode: str) -> list[dict[str, Any]]:
    """The runs @ag-ui/client's HttpAgent made (one JSON line each)."""
    return run_node(folder, "ag_ui_chat.mjs", f"{server.base_url}/ag-ui", mode)


def test_the_ag_ui_client_answers_an_approval_with_resume(serve: Any, node_clients: Path) -> None:
    """HttpAgent runs the thread, sees the tool call, resumes the interrupt, gets the answer."""
    server = serve(harness(*weather_script(), machine=with_approval()))
    first, second = node_run(node_clients, server, "approve")
    assert "error" not in first
    assert first["outcome"] == "interrupt"
    assert first["interrupts"][0]["reason"] == "approval"
    assert "TOOL_CALL_START" in first["types"]
    assert (second["outcome"], second["result"]) == ("success", "Sunny in Lisbon.")
    assert "TOOL_CALL_RESULT" in second["types"]
    assert "TEXT_MESSAGE_CONTENT" in second["types"]


def test_the_ag_ui_client_aborts_a_run(serve: Any, node_clients: Path, tmp_path: Path) -> None:
    """HttpAgent.abortRun() mid-run: the server aborts the run, valid and stored."""
    h = waiting_harness(tmp_path / "s.db")
    [seen] = node_run(node_clients, serve(h), "abort")
    assert "TOOL_CALL_END" in seen["types"]
    assert seen["outcome"] is None
    state = ended(h, "thread-abort")
    assert state.final_state == "aborted"
    assert_valid_history(state.history)


AWKWARD = 'quote " backslash \\ newline \n tab \t control \x01 é 😀 \u2028 </script>'
"""A string every JSON encoder must escape or keep alike."""


def test_events_written_directly_are_the_bytes_of_the_packages_encoder() -> None:
    """Each kind of event the route writes without the package's models, with awkward
    strings, floats and missing values: the bytes ag-ui-protocol's encoder gives."""
    interrupt = Interrupt(
        kind="approval",
        state="approve",
        payload={"calls": [{"name": "w", "input": {"x": AWKWARD}}]},
        tool_use_ids=("call-1",),
    )
    snapshot = {"state": AWKWARD, "turns": 2, "tokens": 7, "cost_usd": 1.5e-05}
    pairs = [
        (
            _wire("RUN_STARTED", metadata={"conversation_token": AWKWARD}, threadId="t", runId="r"),
            agui.RunStartedEvent(
                thread_id="t", run_id="r", metadata={"conversation_token": AWKWARD}
            ),
        ),
        (
            _snapshot(snapshot | {"exit_reason": None}),
            agui.StateSnapshotEvent(snapshot=snapshot | {"exit_reason": None}),
        ),
        (
            _wire("TOOL_CALL_START", toolCallId="c", toolCallName=AWKWARD),
            agui.ToolCallStartEvent(tool_call_id="c", tool_call_name=AWKWARD),
        ),
        (_wire("TOOL_CALL_END", toolCallId="c"), agui.ToolCallEndEvent(tool_call_id="c")),
        (
            _wire("TOOL_CALL_RESULT", messageId="m", toolCallId="c", content=AWKWARD, role="tool"),
            agui.ToolCallResultEvent(
                message_id="m", tool_call_id="c", content=AWKWARD, role="tool"
            ),
        ),
        (_wire("RUN_ERROR", message=AWKWARD), agui.RunErrorEvent(message=AWKWARD)),
        (
            _wire("TEXT_MESSAGE_CONTENT", messageId="m", delta=AWKWARD),
            agui.TextMessageContentEvent(message_id="m", delta=AWKWARD),
        ),
        (_wire("STEP_STARTED", stepName=AWKWARD), agui.StepStartedEvent(step_name=AWKWARD)),
    ]
    states: list[tuple[HarnessState[Any], agui.RunFinishedEvent]] = [
        (
            HarnessState(final_state="model_complete", output_data={"t": AWKWARD, "f": 1e-07}),
            agui.RunFinishedEvent(
                thread_id="t",
                run_id="r",
                result={"t": AWKWARD, "f": 1e-07},
                outcome=agui.RunFinishedSuccessOutcome(),
            ),
        ),
        (
            HarnessState(final_state="aborted", exit_reason="aborted"),
            agui.RunFinishedEvent(
                thread_id="t",
                run_id="r",
                result="[the run ended without an answer: aborted]",
                outcome=agui.RunFinishedCancelledOutcome(),
            ),
        ),
        (
            HarnessState(final_state="suspended", interrupt=interrupt),
            agui.RunFinishedEvent(
                thread_id="t",
                run_id="r",
                result="[the run waits for an answer to its 'approval' interrupt]",
                outcome=agui.RunFinishedInterruptOutcome(
                    interrupts=[
                        agui.Interrupt(
                            id="t:approve:call-1",
                            reason="approval",
                            message=question(interrupt),
                            tool_call_id="call-1",
                            metadata={"payload": interrupt.payload},
                        )
                    ]
                ),
            ),
        ),
    ]
    pairs += [(_finished("t", "r", state), model) for state, model in states]
    for ours, theirs in pairs:
        assert f"data: {wire_json(ours)}\n\n" == EventEncoder().encode(theirs)
