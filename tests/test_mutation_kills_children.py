"""Behaviour of children (sub-agents) that `make mutation` found untested: a child's
spending rolled up into its parent's at each answer and by the exact difference, the turns
a child is given, a handoff's typed output handed up."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, cast

import attrs
import pydantic

from innerloop import Child, HarnessParams, SpendBudget, Usage, agent_tool, tool
from innerloop.events import (
    Abort,
    ChildEvent,
    Event,
    Finished,
    ModelResponseEvent,
    ToolUseComplete,
    Transition,
)
from innerloop.fsm import (
    ChildOutcome,
    ChildRun,
    PhaseContext,
    child_handler,
    child_transitions,
    fan_out_handler,
    handoff_handler,
)
from innerloop.providers._normalize import WireRequest
from innerloop.recovery import Price
from innerloop.recovery._compaction import CompactionRequest, TruncatingCompactor
from innerloop.recovery._tokens import MessageTokenCache
from innerloop.testing import (
    FakeProvider,
    Fault,
    Reply,
    ScriptedProvider,
    assert_valid_history,
    reply,
    tool_call,
)
from innerloop.tools import ToolContext
from tests.fsm.test_child import _collect, _nested

FIRST = Usage(100, 10, 1_000, 10_000, 3)
SECOND = Usage(200, 20, 2_000, 20_000, 6)
PARENT = Usage(7, 1)


@tool
async def look(topic: str) -> str:
    """Look a topic up."""
    return f"more about {topic}"


def _two_answers() -> Child[Any]:
    """A child whose first answer calls a tool and whose second ends it, each with its
    own usage in every field."""
    kid = ScriptedProvider(
        [
            reply(tool_call("look", {"topic": "Lisbon"}, id="k1"), usage=FIRST),
            reply("Done.", usage=SECOND),
        ],
        name="kid",
    )
    return Child("research", HarnessParams(model="kid:m", tools=[look]), providers={"kid": kid})


def _harness(make_harness: Any, child: Child[Any], **params: Any) -> Any:
    model = ScriptedProvider([reply("Report.", usage=PARENT)])
    spec = _nested("research", child_handler(child))
    return make_harness(HarnessParams(model="scripted:m", **params), model, machine=spec)


def test_a_childs_usage_is_rolled_up_by_the_difference_in_every_field(make_harness: Any) -> None:
    """Protects the roll-up's subtraction (``_minus``): at each of the child's answers
    the parent gains what the child spent since the last one, field by field (input,
    output, cache read, cache creation, thinking); an added instead of a subtracted
    previous total would count the child's first answer twice."""
    run = _harness(make_harness, _two_answers()).start("Lisbon facts")
    seen: list[Usage] = []

    async def read() -> list[Event]:
        events = []
        async for event in run.events():
            events.append(event)
            if isinstance(event, ChildEvent) and isinstance(event.event, ModelResponseEvent):
                seen.append(run.state.usage)  # rolled up as each answer arrives
        return events

    events = asyncio.run(read())
    assert seen == [FIRST, FIRST + SECOND]
    assert run.state.usage == FIRST + SECOND + PARENT
    assert run.state.usage == Usage(307, 31, 3_000, 30_000, 9)
    child_end = [
        e.event for e in events if isinstance(e, ChildEvent) and isinstance(e.event, Finished)
    ]
    assert [e.usage for e in child_end] == [FIRST + SECOND]
    assert run.state.turns == 3


def test_a_quiet_childs_usage_is_rolled_up_at_each_answer(make_harness: Any) -> None:
    """Protects the roll-up of a child nobody reads (``run_sync``: its answers handed to
    ``_rolled_up``): the child runs, and the parent's usage and turns hold the child's
    two answers exactly, as each arrives (the parent's tool sees them mid-run)."""
    during: list[tuple[Usage, int]] = []
    runs: list[Any] = []

    @tool
    async def peek() -> str:
        """Reads the parent's totals while the child runs."""
        during.append((runs[0].state.usage, runs[0].state.turns))
        return "ok"

    kid = ScriptedProvider(
        [
            reply(tool_call("peek", {}, id="k1"), usage=FIRST),
            reply(tool_call("peek", {}, id="k2"), usage=SECOND),
            reply("Done.", usage=SECOND),
        ],
        name="kid",
    )
    child = Child("research", HarnessParams(model="kid:m", tools=[peek]), providers={"kid": kid})
    run = _harness(make_harness, child).start("Lisbon facts")
    runs.append(run)
    state = asyncio.run(run.run())
    assert during == [(FIRST, 1), (FIRST + SECOND, 2)]
    assert state.exit_reason == "model_complete"
    assert state.notes["children"]["research"] == {
        "exit_reason": "model_complete",
        "output": "Done.",
        "turns": 3,
        "machine": "innerloop",
    }
    assert state.usage == FIRST + SECOND + SECOND + PARENT
    assert state.turns == 4


def test_a_child_is_given_exactly_the_turns_its_parent_has_left(make_harness: Any) -> None:
    """Protects the child's turn cap (``max(left, 0)``): a parent with ``max_turns=2``
    and a child allowed 5 that needs 2 turns: the child is given the 2 left, answers in
    its second, and the parent, out of turns, ends ``max_turns_exceeded`` without
    calling its own model (a cap of ``min(left, 0)`` would give the child none)."""
    child = _two_answers()
    child = Child(child.name, child.params.evolve(max_turns=5), providers=child.providers)
    harness = _harness(make_harness, child, max_turns=2)
    run = harness.start("Lisbon facts")
    events = asyncio.run(_collect(run))
    ends = {
        e.path: (e.event.exit_reason, e.event.turns)
        for e in events
        if isinstance(e, ChildEvent) and isinstance(e.event, Finished)
    }
    assert ends == {"research": ("model_complete", 2)}
    assert (run.state.exit_reason, run.state.turns) == ("max_turns_exceeded", 2)


class Verdict(pydantic.BaseModel):
    city: str
    sunny: bool


def test_a_handoff_hands_its_typed_output_up(make_harness: Any) -> None:
    """Protects ``parent.output_data = state.output_data`` in a handoff: the writer's
    typed output (its ``output_type``) becomes the parent's ``output`` and
    ``output_data``, as its history and final state do."""
    writer = Child(
        "writer",
        HarnessParams(model="w:m", output_type=Verdict),
        providers={"w": ScriptedProvider([reply('{"city": "Lisbon", "sunny": true}')], name="w")},
    )
    spec = _nested("writer", handoff_handler(writer), source="check", target="model_complete")
    harness = make_harness(
        HarnessParams(model="scripted:m"), ScriptedProvider([reply("Notes.")]), machine=spec
    )
    run = harness.start("Is Lisbon sunny?")
    asyncio.run(_collect(run))
    state = run.state
    assert state.exit_reason == "model_complete"
    assert state.output_data == {"city": "Lisbon", "sunny": True}
    assert state.output == Verdict(city="Lisbon", sunny=True)
    assert state.notes["children"]["writer"]["output"] == {"city": "Lisbon", "sunny": True}
    assert state.history[-1].text == '{"city": "Lisbon", "sunny": true}'
    assert_valid_history(state.history)


def _budget_seen(make_harness: Any, budget: SpendBudget, parent_usage: Usage) -> SpendBudget:
    """The spend budget a child (behind an agent tool) runs under, read by its tool, when
    the parent (priced at $0.025 an input token) answered with ``parent_usage``."""
    seen: list[SpendBudget | None] = []

    @tool
    async def note(ctx: ToolContext) -> str:
        """Notes the budget this run has."""
        seen.append(cast(HarnessParams, ctx.params).spend_budget)
        return "ok"

    kid = ScriptedProvider([reply(tool_call("note", {}, id="k1")), reply("Done.")], name="kid")
    child = Child("spender", HarnessParams(model="kid:m", tools=[note]), providers={"kid": kid})
    model = ScriptedProvider(
        [reply(tool_call("spender", {"task": "spend"}, id="p1"), usage=parent_usage)]
    )
    params = HarnessParams(
        model="scripted:m",
        tools=[agent_tool(child, "Spends.")],
        spend_budget=budget,
        prices={"m": Price(25_000, 0)},
    )
    asyncio.run(_collect(make_harness(params, model).start("Go.")))
    assert len(seen) == 1
    assert seen[0] is not None
    return seen[0]


def test_a_child_is_given_what_is_left_of_its_parents_budget(make_harness: Any) -> None:
    """Protects the cap of a child's spend budget (``_capped``): after the parent's answer
    (15 tokens, $0.25) under ``SpendBudget(16, 1.0)`` the child is given 1 token and
    $0.75; a parent already past its budget (60 tokens, $1.50 of 10 and $1) gives its
    child the least budget that can be stated, 1 token and $1e-9, never a larger one."""
    left = _budget_seen(make_harness, SpendBudget(16, 1.0), Usage(10, 5))
    assert left == SpendBudget(1, 0.75)
    past = _budget_seen(make_harness, SpendBudget(10, 1.0), Usage(60, 0))
    assert past == SpendBudget(1, 1e-9)


@tool
async def block() -> str:
    """Blocks until cancelled."""
    await asyncio.Event().wait()
    return "never"


def test_a_child_run_aborted_by_its_handler_ends_aborted(make_harness: Any) -> None:
    """Protects ``ChildRun.abort``: a handler of its own runs a child and aborts it once
    the child's tool call is complete; the child ends ``aborted`` with a valid history and
    the reason given, its model asked once, and the parent takes the failure edge."""
    kid = ScriptedProvider([reply(tool_call("block", {}, id="k1")), reply("never")], name="kid")
    child = Child("research", HarnessParams(model="kid:m", tools=[block]), providers={"kid": kid})

    async def handler(ctx: PhaseContext) -> AsyncIterator[Event]:
        run = ChildRun(ctx, child, "Go.")
        async for event in run.events():
            yield event
            if isinstance(event.event, ToolUseComplete):
                run.abort("enough for now")
        ctx.state.notes["child"] = (run.state.exit_reason, run.state.abort)
        ctx.state.outcome = ChildOutcome.SUCCEEDED if run.succeeded else ChildOutcome.FAILED

    harness = make_harness(
        HarnessParams(model="scripted:m"),
        ScriptedProvider([reply("unused")]),
        machine=_nested("research", handler),
    )
    run = harness.start("Go.")
    events = asyncio.run(_collect(run))
    exit_reason, abort = run.state.notes["child"]
    assert exit_reason == "aborted"
    assert abort is not None
    assert abort.reason == "enough for now"
    assert len(kid.requests) == 1
    moves = [(e.source, e.target) for e in events if isinstance(e, Transition)]
    assert moves == [("idle", "research"), ("research", "failed")]


def test_a_state_whose_handler_cannot_suspend_has_no_suspended_edge() -> None:
    """Protects the edges of a child state: ``child_transitions`` draws ``suspended
    [interrupted]`` only when asked to, and ``with_child_state`` asks only for a handler
    that passes a child's question up (a plain handler in a machine that has the
    ``suspended`` state gets none)."""
    assert [(t.target, t.guard) for t in child_transitions("s", "done", "failed")] == [
        ("abort", "abort_requested"),
        ("done", "child_succeeded"),
        ("failed", None),
    ]

    async def plain(ctx: PhaseContext) -> AsyncIterator[Event]:
        ctx.state.outcome = ChildOutcome.SUCCEEDED
        return
        yield

    spec = _nested("research", plain)
    assert "suspended" in {s.name for s in spec.final_states}
    edges = [(t.target, t.guard) for t in spec.transitions if t.source == "research"]
    assert edges == [
        ("abort", "abort_requested"),
        ("assemble", "child_succeeded"),
        ("failed", None),
    ]


def test_children_side_by_side_are_aborted_when_together_they_spend_the_budget(
    make_harness: Any,
) -> None:
    """Protects the abort of a child that takes its parent past its spend budget: two
    fan-out branches run side by side (their answers alternate: the model yields to the
    loop once per call), each given the parent's whole 100 tokens, each answer 30. The
    fourth answer (120 in all) aborts its branch, the fifth the other; neither reaches
    its own budget, and no sixth answer is asked for."""
    asked: list[str] = []

    async def answer(request: WireRequest) -> Reply:
        await asyncio.sleep(0)  # the other branch's turn
        asked.append(request.payload["messages"][0]["content"][0]["text"])
        return reply(tool_call("look", {"topic": "x"}, id=f"c{len(asked)}"), usage=Usage(30, 0))

    kid = FakeProvider(answer, name="kid")
    child = Child("web", HarnessParams(model="kid:m", tools=[look]), providers={"kid": kid})
    spec = _nested("survey", fan_out_handler(child, lambda s: ["a", "b"], limit=2))
    params = HarnessParams(model="scripted:m", spend_budget=SpendBudget(max_tokens=100))
    run = make_harness(params, ScriptedProvider([reply("unused")]), machine=spec).start("Go.")
    events = asyncio.run(_collect(run))
    ends = {
        e.path: (e.event.exit_reason, e.event.usage.total_tokens)
        for e in events
        if isinstance(e, ChildEvent) and isinstance(e.event, Finished)
    }
    assert ends == {"web#1": ("aborted", 90), "web#2": ("aborted", 60)}
    assert asked == ["a", "b", "a", "b", "a"]
    reasons = [
        e.event.reason for e in events if isinstance(e, ChildEvent) and isinstance(e.event, Abort)
    ]
    assert sorted(reasons) == [
        "the parent's spend budget is spent (child 'web#1')",
        "the parent's spend budget is spent (child 'web#2')",
    ]
    assert (run.state.exit_reason, run.state.usage.total_tokens) == ("failed", 150)


class _PaidCompactor:
    """Truncates, as the default does, and reports what a summarizing model spent."""

    async def compact(self, request: CompactionRequest, tokens: MessageTokenCache) -> Any:
        result = await TruncatingCompactor().compact(request, tokens)
        return attrs.evolve(result, usage=Usage(40, 2), model="m")


def test_what_a_child_spends_after_its_last_answer_is_rolled_up_when_it_ends(
    make_harness: Any,
) -> None:
    """Protects the roll-up when a child ends: a child whose only spending is a
    compaction (its context overflowed, the compactor's model spent 42 tokens, then it
    could not shrink and failed) answered nothing, so only the roll-up at its end
    hands those tokens to the parent."""
    kid = ScriptedProvider([Fault.context_overflow()], name="kid")
    child = Child("research", HarnessParams(model="kid:m"), providers={"kid": kid})
    harness = make_harness(
        HarnessParams(model="scripted:m"),
        ScriptedProvider([reply("unused")]),
        machine=_nested("research", child_handler(child)),
        compactor=_PaidCompactor(),
    )
    run = harness.start("Go.")
    events = asyncio.run(_collect(run))
    ends = {
        e.path: (e.event.exit_reason, e.event.usage)
        for e in events
        if isinstance(e, ChildEvent) and isinstance(e.event, Finished)
    }
    assert ends == {"research": ("failed", Usage(40, 2))}
    assert (run.state.exit_reason, run.state.usage, run.state.turns) == (
        "failed",
        Usage(40, 2),
        0,
    )
