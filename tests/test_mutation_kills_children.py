"""Behaviour of children (sub-agents) that `make mutation` found untested: a child's
spending rolled up into its parent's at each answer and by the exact difference, the turns
a child is given, a handoff's typed output handed up."""

from __future__ import annotations

import asyncio
from typing import Any

import pydantic

from innerloop import Child, HarnessParams, Usage, tool
from innerloop.events import ChildEvent, Event, Finished, ModelResponseEvent
from innerloop.fsm import child_handler, handoff_handler
from innerloop.testing import ScriptedProvider, assert_valid_history, reply, tool_call
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
