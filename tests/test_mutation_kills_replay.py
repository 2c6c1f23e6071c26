"""Behaviour of replay that `make mutation` found untested: what a divergence says (each
line, in order), which difference of a run's end is named first, a replay that makes
more calls than the run did, a changed tool set named in the request's difference."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from innerloop import (
    Harness,
    HarnessParams,
    HarnessState,
    Message,
    ModelResponse,
    ToolSpec,
    Usage,
)
from innerloop.checkpoint import MemoryCheckpointer
from innerloop.events import ToolExecuted
from innerloop.examples import with_guardrail
from innerloop.testing import (
    Divergence,
    ReplayResult,
    ScriptedProvider,
    replay,
    reply,
    tool_call,
)
from innerloop.tools import ToolContext, ToolOutput
from tests.testing.test_replay import ADD, PARAMS, SCRIPT, record


def _edited(log: Path, change: Callable[[dict[str, Any]], None]) -> Path:
    """``log`` with its ``finished`` event changed by ``change``."""
    lines = []
    for line in log.read_text().splitlines():
        event = json.loads(line)
        if event["type"] == "finished":
            change(event)
            line = json.dumps(event, separators=(",", ":"))
        lines.append(line)
    log.write_text("\n".join(lines) + "\n")
    return log


def test_a_divergence_says_where_what_was_recorded_and_replayed_and_the_response() -> None:
    """Protects the text of a divergence: where (the call, its state), the recorded and
    the replayed side, each differing part of the request, the recorded response, one a
    line, in that order; a replay result's repr names the first line."""
    response = ModelResponse(Message.assistant("It is 4."), "end_turn")
    d = Divergence(
        "request",
        "call",
        2,
        "scripted:m, 3 messages, request 0123456789ab",
        "scripted:m, 4 messages, request ba9876543210",
        ("messages: recorded 3, replayed 4",),
        response,
        path="research",
    )
    assert str(d) == (
        "model call 2 in state 'call' of child 'research'\n"
        "  recorded: scripted:m, 3 messages, request 0123456789ab\n"
        "  replayed: scripted:m, 4 messages, request ba9876543210\n"
        "  request messages: recorded 3, replayed 4\n"
        "  recorded response: [end_turn] 'It is 4.'"
    )
    result = ReplayResult("run 2 of x.jsonl", d, HarnessState(), 7, 1)
    assert repr(result) == (
        "<ReplayResult run 2 of x.jsonl: diverged at model call 2 in state 'call' of child "
        "'research', 7 transitions>"
    )


def test_a_changed_turn_count_at_the_end_names_the_recorded_one_first(tmp_path: Path) -> None:
    """Protects the order of a divergence at the run's end: the record's turns (edited to
    9) are the recorded side, the replay's 2 the replayed one."""
    log = _edited(record(tmp_path / "run.jsonl"), lambda e: e.update(turns=9))
    d = replay(log, specs=[with_guardrail()]).divergence
    assert d is not None
    assert (d.kind, d.state, d.recorded, d.replayed) == (
        "end",
        "model_complete",
        "turns=9",
        "turns=2",
    )


def test_the_cost_is_compared_before_the_interrupt_at_the_end(tmp_path: Path) -> None:
    """Protects the order of the end's comparisons (exit reason, turns, usage, cost, the
    interrupt, the history): a record whose cost and interrupt both differ names the
    cost."""

    def change(event: dict[str, Any]) -> None:
        event.update(cost_usd=1.5, interrupt={"kind": "approval", "payload": {}})

    log = _edited(record(tmp_path / "run.jsonl"), change)
    d = replay(log, specs=[with_guardrail()]).divergence
    assert d is not None
    assert (d.kind, d.recorded, d.replayed) == ("end", "cost_usd=1.5", "cost_usd=0.0")


def test_a_replay_that_calls_the_model_more_often_than_the_run_parts_there(
    tmp_path: Path,
) -> None:
    """Protects the refusal of a call the record lacks: a log whose second model call
    (its request and response) was cut out replays the same path up to that call and
    parts there, saying the run made one call."""
    log = record(tmp_path / "run.jsonl")
    lines, seen = [], 0
    for line in log.read_text().splitlines():
        kind = json.loads(line)["type"]
        seen += kind == "model_call"
        if not (seen == 2 and kind in ("model_call", "model_response")):
            lines.append(line)
    log.write_text("\n".join(lines) + "\n")
    d = replay(log, specs=[with_guardrail()]).divergence
    assert d is not None
    assert (d.kind, d.state, d.step, d.recorded) == (
        "request",
        "call",
        2,
        "no call 2: the run made 1 model calls",
    )
    assert d.replayed.startswith("scripted:scripted-model-20250101, 3 messages, request ")


async def _extra(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    return ToolOutput("")


def test_a_changed_tool_set_is_named_in_the_requests_difference(tmp_path: Path) -> None:
    """Protects the request difference for tools: a replay offered one tool more than the
    run parts at its first call, naming both tool lists."""
    log = record(tmp_path / "run.jsonl")
    extra = ToolSpec("extra", "One more.", {"type": "object"}, _extra)
    d = replay(
        log, specs=[with_guardrail()], params=lambda p: p.evolve(tools=[*p.tools, extra])
    ).divergence
    assert d is not None
    assert (d.kind, d.step) == ("request", 1)
    assert d.request == ("tools: recorded ['add'], replayed ['add', 'extra']",)
    assert d.response is not None
    assert not isinstance(d.response, Exception)
    assert d.response.usage == Usage(10, 5)


async def _ask(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    ctx.interrupt({"question": "which?"})


def test_a_stored_run_suspended_in_a_batch_replays_the_same() -> None:
    """A stored run that suspended on a tool's question, beside a call that had finished
    (its result kept in the interrupt): the replay serves the finished call from the
    interrupt, asks the question again, and ends the same, waiting on the same question.
    (A store's record once dropped the interrupt, so such a run parted at its first tool
    call.)"""
    params = HarnessParams(
        model="scripted:scripted-model-20250101",
        tools=[ADD, ToolSpec("ask", "Ask.", {"type": "object"}, _ask)],
    )
    script = [
        reply(tool_call("add", {"a": 2, "b": 2}, id="call_1"), tool_call("ask", {}, id="call_2"))
    ]
    store = MemoryCheckpointer()
    harness = Harness(params, [ScriptedProvider(script)], checkpointer=store)
    assert harness.run_sync("Go.", run_id="r1").exit_reason == "suspended"
    result = replay(store, "r1", params=params).assert_same()
    asked = result.state.interrupt
    assert asked is not None
    assert (asked.kind, asked.tool_use_ids) == ("question", ("call_2",))
    assert [(b.tool_use_id, b.content) for b in asked.done] == [("call_1", "4")]


async def _aborted_after_the_call() -> list[dict[str, Any]]:
    harness = Harness(PARAMS, [ScriptedProvider(SCRIPT)])
    run = harness.start("What is 2 + 2?")
    events = []
    async for event in run.events():
        events.append(event.to_dict())
        if isinstance(event, ToolExecuted):
            run.abort("the host said stop")
    return events


def test_a_host_abort_after_the_batchs_last_call_finished_replays_the_same() -> None:
    """The host aborts as the batch's only call reports its result: the replay serves
    the abort in the same batch, after that call, and ends ``aborted`` with its result
    in the history, as the run did."""
    events = asyncio.run(_aborted_after_the_call())
    assert events[-1]["exit_reason"] == "aborted"
    result = replay(events).assert_same()
    assert result.state.exit_reason == "aborted"
    tool_results = [(b.tool_use_id, b.content) for b in result.state.history[-1].tool_results]
    assert tool_results == [("call_1", "4")]
