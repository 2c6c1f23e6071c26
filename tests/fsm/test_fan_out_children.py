"""A fan-out over a list of different children: each its own params, tools, prompt and
model, side by side under one limit, leaving by the child state's declared edges."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from innerloop import Child, HarnessParams, SpendBudget, tool
from innerloop.durable._app import children as durable_children
from innerloop.events import ChildEvent, Event, Finished, Transition
from innerloop.examples import with_approval
from innerloop.fsm import (
    DEFAULT_SPEC,
    MachineSpec,
    StateSpec,
    compile_spec,
    fan_out_handler,
    with_child_state,
)
from innerloop.providers._normalize import WireRequest
from innerloop.testing import FakeProvider, Reply, ScriptedProvider, reply, tool_call
from tests.fsm.test_child import _child_finals


def _text(request: WireRequest) -> str:
    content = request.payload["messages"][-1]["content"]
    return content if isinstance(content, str) else content[-1].get("text", "")


def _system(request: WireRequest) -> str:
    return "".join(block["text"] for block in request.payload["system"])


def _spec(handler: Any) -> MachineSpec:
    return with_child_state(
        DEFAULT_SPEC,
        StateSpec("survey", doc="specialists side by side"),
        handler,
        source="idle",
        target="assemble",
        on_failure="failed",
    ).renamed("specialists")


def _parent(make_harness: Any, spec: MachineSpec, **params: Any) -> Any:
    model = ScriptedProvider([reply("Summary."), reply("Again.")])
    return make_harness(HarnessParams(model="scripted:m", **params), model, machine=spec)


async def _events(run: Any) -> list[Event]:
    return [e async for e in run.events()]


def _moves(events: list[Event]) -> list[tuple[str, str, str | None]]:
    return [(e.source, e.target, e.guard) for e in events if isinstance(e, Transition)]


@tool
async def search(query: str) -> str:
    """Search the web."""
    return f"hits for {query}"


def _specialists() -> tuple[Child[Any], Child[Any], FakeProvider, FakeProvider]:
    """Two different children: a web agent with a tool, on its own model, and a code
    reader with its own system prompt and prompt, on another."""
    web_model = FakeProvider(
        lambda r: (
            reply("web: sunny")
            if r.payload["messages"][-1]["role"] == "user" and len(r.payload["messages"]) > 1
            else reply(tool_call("search", {"query": _text(r)}, id="s1"))
        ),
        name="webm",
    )
    code_model = FakeProvider(lambda r: reply(f"code read: {_text(r)}"), name="codem")
    web = Child(
        "web",
        HarnessParams(model="webm:m", tools=[search], system="You search."),
        providers={"webm": web_model},
    )
    code = Child(
        "code",
        HarnessParams(model="codem:m", system="You read code."),
        prompt=lambda state: f"the code behind: {state.history[-1].text}",
        providers={"codem": code_model},
    )
    return web, code, web_model, code_model


def test_different_children_run_each_with_its_own_params_and_join_in_order(
    make_harness: Any,
) -> None:
    """``survey -> assemble [child_succeeded]``: each child ran with its own model,
    system prompt, tools and prompt; the answers join in the list's order, each noted
    under its own name; their tokens roll up to the parent."""
    web, code, web_model, code_model = _specialists()
    harness = _parent(make_harness, _spec(fan_out_handler([web, code])))
    run = harness.start("weather app")
    events = asyncio.run(_events(run))
    assert _moves(events)[:2] == [
        ("idle", "survey", None),
        ("survey", "assemble", "child_succeeded"),
    ]
    assert _child_finals(events) == {"web": "model_complete", "code": "model_complete"}
    assert run.state.history[0].content[-1].text == (
        "[web] web: sunny\n[code] code read: the code behind: weather app"
    )
    notes = run.state.notes["children"]
    assert {k: (v["exit_reason"], v["output"], v["turns"]) for k, v in notes.items()} == {
        "web": ("model_complete", "web: sunny", 2),
        "code": ("model_complete", "code read: the code behind: weather app", 1),
    }
    assert [_system(r) for r in web_model.requests] == ["You search."] * 2
    assert [t["name"] for t in web_model.requests[0].payload["tools"]] == ["search"]
    assert _system(code_model.requests[0]) == "You read code."
    assert "tools" not in code_model.requests[0].payload
    assert run.state.turns == 4  # the web agent's two, the code reader's one, the parent's
    assert run.state.exit_reason == "model_complete"


def test_items_give_one_input_per_child_in_order(make_harness: Any) -> None:
    """With ``items``, each child gets the input at its place in the list."""
    web, code, web_model, _ = _specialists()
    handler = fan_out_handler([code, web], lambda state: ["main.py", "Lisbon"])
    harness = _parent(make_harness, _spec(handler))
    state = harness.run_sync("go")
    assert state.history[0].content[-1].text == "[code] code read: main.py\n[web] web: sunny"
    assert _text(web_model.requests[0]) == "Lisbon"


def test_items_of_another_length_than_the_children_are_refused(make_harness: Any) -> None:
    """``items`` must give one input per child: the error says how many of each."""
    web, code, _, _ = _specialists()
    handler = fan_out_handler([web, code], lambda state: ["only one"])
    harness = _parent(make_harness, _spec(handler))
    with pytest.raises(ValueError, match="gave 1 inputs") as info:
        harness.run_sync("go")
    assert str(info.value) == (
        "fan_out_handler(['web', 'code']): items(state) gave 1 inputs for 2 children; give "
        "one input per child, in their order"
    )


def test_one_child_failing_takes_the_failure_edge(make_harness: Any) -> None:
    """A child that ends in ``max_turns_exceeded`` sends ``survey -> failed``; the other
    ran to its end."""
    web, code, _, _ = _specialists()
    short = Child("web", web.params.evolve(max_turns=1), providers=web.providers)
    harness = _parent(make_harness, _spec(fan_out_handler([short, code])))
    run = harness.start("weather app")
    events = asyncio.run(_events(run))
    assert _child_finals(events) == {"web": "max_turns_exceeded", "code": "model_complete"}
    assert _moves(events) == [("idle", "survey", None), ("survey", "failed", None)]


def test_a_limit_of_one_runs_the_children_one_at_a_time(make_harness: Any) -> None:
    """``limit=1``: the second child starts once the first has ended."""
    running = peak = 0

    async def answer(request: WireRequest) -> Reply:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0)
        running -= 1
        return reply(_text(request))

    kids = [
        Child(n, HarnessParams(model="k:m"), providers={"k": FakeProvider(answer, name="k")})
        for n in ("a", "b", "c")
    ]
    harness = _parent(make_harness, _spec(fan_out_handler(kids, limit=1)))
    run = harness.start("x")
    events = asyncio.run(_events(run))
    order = [e.path for e in events if isinstance(e, ChildEvent) and isinstance(e.event, Finished)]
    assert (order, peak) == (["a", "b", "c"], 1)


def test_the_parent_budget_bounds_the_children_together(make_harness: Any) -> None:
    """The children's tokens count against the parent's one spend budget: with room for
    them all, the parent's own answer takes it past (``check -> budget_exceeded``); with
    less, the child whose answer spends it is aborted and the fan-out fails."""
    fits = _parent(
        make_harness,
        _spec(fan_out_handler(list(_specialists()[:2]))),
        spend_budget=SpendBudget(max_tokens=50),
    )
    state = fits.run_sync("weather app")
    assert (state.usage.total_tokens, state.exit_reason) == (60, "budget_exceeded")
    short = _parent(
        make_harness,
        _spec(fan_out_handler(list(_specialists()[:2]))),
        spend_budget=SpendBudget(max_tokens=40),
    )
    run = short.start("weather app")
    events = asyncio.run(_events(run))
    assert _child_finals(events) == {"web": "model_complete", "code": "aborted"}
    assert (run.state.usage.total_tokens, run.state.exit_reason) == (45, "failed")


def test_a_child_that_asks_suspends_the_parent_and_resume_lands_in_it(
    make_harness: Any,
) -> None:
    """``survey -> suspended [interrupted]``: the child on an approval machine asks; the
    answer lands in it, and the parent goes on ``survey -> assemble``."""
    web, _, _, _ = _specialists()
    careful = Child("careful", web.params, machine=with_approval(), providers=web.providers)
    quick = Child(
        "quick",
        HarnessParams(model="q:m"),
        providers={"q": ScriptedProvider([reply("quick: done")], name="q")},
    )
    harness = _parent(make_harness, _spec(fan_out_handler([quick, careful])))
    run = harness.start("Lisbon")
    state = asyncio.run(run.run())
    assert (state.exit_reason, state.interrupt.kind, state.interrupt.path) == (
        "suspended",
        "approval",
        "careful",
    )
    resumed = harness.resume(run, answer=True)
    events = asyncio.run(_events(resumed))
    assert _moves(events)[-1] == ("check", "model_complete", "model_finished")
    assert ("survey", "assemble", "child_succeeded") in _moves(events)
    assert resumed.state.history[0].content[-1].text == "[quick] quick: done\n[careful] web: sunny"


def test_a_parent_abort_aborts_every_child(make_harness: Any) -> None:
    """``survey -> abort [abort_requested]``: an abort while the children run aborts
    each of them, validly."""
    gate = asyncio.Event()

    async def wait(request: WireRequest) -> Reply:
        await gate.wait()
        return reply("never")

    kids = [
        Child(n, HarnessParams(model="k:m"), providers={"k": FakeProvider(wait, name="k")})
        for n in ("a", "b")
    ]
    harness = _parent(make_harness, _spec(fan_out_handler(kids)))
    run = harness.start("x")

    async def drive() -> list[Event]:
        seen: list[Event] = []
        calls = 0
        async for event in run.events():
            seen.append(event)
            if isinstance(event, ChildEvent) and getattr(event.event, "target", "") == "call":
                calls += 1
                if calls == 2:
                    run.abort("host stop")
        return seen

    events = asyncio.run(drive())
    assert _child_finals(events) == {"a": "aborted", "b": "aborted"}
    assert _moves(events)[1] == ("survey", "abort", "abort_requested")


def _kid(name: str) -> Child[Any]:
    return Child(name, HarnessParams(model="k:m"))


@pytest.mark.parametrize(
    ("given", "error", "message"),
    [
        (
            [],
            TypeError,
            "fan_out_handler takes a Child (run once per input of items) or a non-empty list "
            "of Child (each run once, side by side); got []",
        ),
        (
            ["web"],
            TypeError,
            "fan_out_handler takes a Child (run once per input of items) or a non-empty list "
            "of Child (each run once, side by side); got str 'web'",
        ),
        (
            "web",
            TypeError,
            "fan_out_handler takes a Child (run once per input of items) or a non-empty list "
            "of Child (each run once, side by side); got 'web'",
        ),
        (
            "twice",
            ValueError,
            "fan_out_handler(['web', 'web']): two children named 'web'; each child of a "
            "fan-out needs a name of its own (it is the child's path and its key in "
            "notes['children'])",
        ),
    ],
)
def test_what_is_not_a_list_of_children_is_named(given: Any, error: type, message: str) -> None:
    """Refused when the handler is made, each with what to pass instead."""
    children = [_kid("web"), _kid("web")] if given == "twice" else given
    with pytest.raises(error) as info:
        fan_out_handler(children)
    assert str(info.value) == message


def test_one_child_without_items_and_a_zero_limit_are_refused() -> None:
    """One child runs once per input: without ``items`` it says so; a limit below 1 too."""
    with pytest.raises(TypeError) as info:
        fan_out_handler(_kid("web"))
    assert str(info.value) == (
        "fan_out_handler('web'): one child runs once per input of items(state); pass items=, "
        "or a list of children to run each once"
    )
    with pytest.raises(ValueError, match="limit") as limit:
        fan_out_handler([_kid("a"), _kid("b")], limit=0)
    assert str(limit.value) == "fan_out_handler(['a', 'b']): limit must be at least 1, not 0"


def test_a_durable_worker_finds_every_child_of_the_fan_out() -> None:
    """The children a durable worker can run are all of the list's, by name."""
    a, b = _kid("a"), _kid("b")
    machine = compile_spec(_spec(fan_out_handler([a, b])))
    assert durable_children(machine, HarnessParams(model="p:m")) == {"a": a, "b": b}


def test_the_one_child_form_is_unchanged(make_harness: Any) -> None:
    """``fan_out_handler(child, items)`` still runs ``name#1``, ``name#2`` with a list in
    the notes."""
    kid = Child(
        "web",
        HarnessParams(model="k:m"),
        providers={"k": FakeProvider(lambda r: reply(f"{_text(r)}: ok"), name="k")},
    )
    harness = _parent(make_harness, _spec(fan_out_handler(kid, lambda s: ["a", "b"])))
    state = harness.run_sync("x")
    assert [c["output"] for c in state.notes["children"]["web"]] == ["a: ok", "b: ok"]
    assert state.history[0].content[-1].text == "[web#1] a: ok\n[web#2] b: ok"
