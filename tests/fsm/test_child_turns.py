"""``max_turns`` across children: a child's own limit applies to it, and the parent's
bounds the total (its own turns and every child's)."""

from __future__ import annotations

import asyncio
from typing import Any

from innerloop import Child, HarnessParams, agent_tool, tool
from innerloop.events import ChildEvent, Finished, ToolExecuted, Transition
from innerloop.fsm import MachineSpec, child_handler, fan_out_handler
from innerloop.providers import AnthropicProvider, OpenAIProvider
from innerloop.testing import AnthropicServer, OpenAIServer, assert_valid_history, reply, tool_call
from tests.fsm.test_child import ANTHROPIC_KEY, CLAUDE, GPT, OPENAI_KEY, _collect, _nested


@tool
async def look(topic: str) -> str:
    """Look a topic up."""
    return f"more about {topic}"


def _digging(server: OpenAIServer, name: str = "research", max_turns: int = 20) -> Child[Any]:
    """A child on the OpenAI SDK that looks things up for ever (one call a turn)."""
    server.respond = lambda body: reply(
        tool_call("look", {"topic": "Lisbon"}, id=f"call_{len(body['messages'])}")
    )
    return Child(
        name,
        HarnessParams(model=GPT, tools=[look], max_turns=max_turns),
        providers={"openai": OpenAIProvider(OPENAI_KEY, base_url=server.base_url)},
    )


def _run(make_harness: Any, spec: MachineSpec, claude: AnthropicServer, max_turns: int) -> Any:
    harness = make_harness(
        HarnessParams(model=CLAUDE, max_turns=max_turns),
        [AnthropicProvider(ANTHROPIC_KEY, base_url=claude.base_url)],
        machine=spec,
    )
    run = harness.start("Lisbon facts")
    return run, asyncio.run(_collect(run))


def _ends(events: list[Any]) -> dict[str, tuple[str, int]]:
    return {
        e.path: (e.event.exit_reason, e.event.turns)
        for e in events
        if isinstance(e, ChildEvent) and isinstance(e.event, Finished)
    }


def test_a_child_is_limited_by_its_own_max_turns(make_harness: Any) -> None:
    """The child's ``max_turns=2`` (the parent has 10): it ends ``max_turns_exceeded``
    after two turns and the parent takes ``research -> failed``; the parent's turns
    count the child's two."""
    with AnthropicServer() as a, OpenAIServer() as o:
        spec = _nested("research", child_handler(_digging(o, max_turns=2)))
        run, events = _run(make_harness, spec, a, max_turns=10)
        asked = (len(a.requests), len(o.requests))
    assert asked == (0, 2)
    assert _ends(events) == {"research": ("max_turns_exceeded", 2)}
    moves = [(e.source, e.target) for e in events if isinstance(e, Transition)]
    assert moves == [("idle", "research"), ("research", "failed")]
    assert (run.state.exit_reason, run.state.turns) == ("failed", 2)


def test_a_child_is_given_only_the_turns_the_parent_has_left(make_harness: Any) -> None:
    """The parent's ``max_turns=3`` bounds the total: the child (its own limit 20) ends
    ``max_turns_exceeded`` after three turns, and the failure edge routes the parent."""
    with AnthropicServer() as a, OpenAIServer() as o:
        spec = _nested("research", child_handler(_digging(o)))
        run, events = _run(make_harness, spec, a, max_turns=3)
        asked = len(o.requests)
    assert asked == 3
    assert _ends(events) == {"research": ("max_turns_exceeded", 3)}
    assert (run.state.exit_reason, run.state.turns) == ("failed", 3)


def test_the_parent_has_only_what_its_children_left(make_harness: Any) -> None:
    """A child that answers in two turns leaves the parent (``max_turns=3``) one: the
    parent's answer is its third turn and it ends ``model_complete``; with
    ``max_turns=2`` nothing is left and the parent ends ``max_turns_exceeded`` before
    calling its model."""
    for max_turns, parent_calls, reason in ((3, 1, "model_complete"), (2, 0, "max_turns_exceeded")):

        def respond(body: dict[str, Any]) -> Any:
            if body["messages"][-1]["role"] == "tool":
                return reply("Lisbon: 545,000 people.")
            return reply(tool_call("look", {"topic": "Lisbon"}, id="call_1"))

        with AnthropicServer([reply("About 545,000.")]) as a, OpenAIServer(respond=respond) as o:
            child = Child(
                "research",
                HarnessParams(model=GPT, tools=[look]),
                providers={"openai": OpenAIProvider(OPENAI_KEY, base_url=o.base_url)},
            )
            spec = _nested("research", child_handler(child))
            run, events = _run(make_harness, spec, a, max_turns=max_turns)
            asked = len(a.requests)
        assert _ends(events) == {"research": ("model_complete", 2)}
        assert (asked, run.state.exit_reason) == (parent_calls, reason)
        assert run.state.turns == 2 + parent_calls


def test_fan_out_branches_share_the_parents_turns(make_harness: Any) -> None:
    """Branches one at a time under the parent's ``max_turns=3``: the first is given
    three turns and uses them; the second starts with none left and ends
    ``max_turns_exceeded`` without a model call; the fan-out takes its failure edge."""
    with AnthropicServer() as a, OpenAIServer() as o:
        lines = fan_out_handler(_digging(o, "web"), lambda s: ["a", "b"], limit=1)
        run, events = _run(make_harness, _nested("survey", lines), a, max_turns=3)
        asked = len(o.requests)
    assert asked == 3
    assert _ends(events) == {"web#1": ("max_turns_exceeded", 3), "web#2": ("max_turns_exceeded", 0)}
    assert (run.state.exit_reason, run.state.turns) == ("failed", 3)


def test_an_agent_tools_child_is_given_the_turns_left(make_harness: Any) -> None:
    """The parent (``max_turns=4``) spends a turn calling the agent tool: its child is
    given the three left, ends ``max_turns_exceeded``, and the call's result is an error
    naming that; the parent, out of turns, ends ``max_turns_exceeded``."""
    parent_script = [reply(tool_call("research", {"task": "Lisbon facts"}, id="toolu_01"))]
    with AnthropicServer(parent_script) as a, OpenAIServer() as o:
        params = HarnessParams(
            model=CLAUDE, tools=[agent_tool(_digging(o), "Research.")], max_turns=4
        )
        harness = make_harness(params, [AnthropicProvider(ANTHROPIC_KEY, base_url=a.base_url)])
        run = harness.start("Lisbon facts")
        events = asyncio.run(_collect(run))
        asked = (len(a.requests), len(o.requests))
    assert asked == (1, 3)
    assert _ends(events) == {"research[toolu_01]": ("max_turns_exceeded", 3)}
    results = [(e.is_error, e.output[:45]) for e in events if isinstance(e, ToolExecuted)]
    assert results == [(True, "agent 'research' ended in max_turns_exceeded")]
    assert (run.state.exit_reason, run.state.turns) == ("max_turns_exceeded", 4)
    assert_valid_history(run.state.history)
