"""Behaviour of conversations (``Session``) that `make mutation` found untested: the
conversation's dollar limit, a message's own token budget under a conversation limit on
dollars only, a resume that reads what another session object stored, a new
conversation looked up in the store once."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from innerloop import (
    HarnessParams,
    ResumeError,
    SessionLimitError,
    SpendBudget,
    Usage,
)
from innerloop.checkpoint import Checkpointer, open_checkpointer
from innerloop.recovery import Price
from innerloop.testing import ScriptedProvider, reply, tool_call
from innerloop.tools import ToolContext, ToolOutput, ToolSpec

OBJ = {"type": "object"}
PRICED = {"m": Price(10_000, 0)}
"""$0.01 an input token."""


async def _echo(args: Any, ctx: ToolContext) -> ToolOutput:
    return ToolOutput("ok")


async def _ask(args: Any, ctx: ToolContext) -> ToolOutput:
    ctx.interrupt({"question": "which branch?"})


@pytest.fixture
def store() -> Iterator[Checkpointer]:
    opened = open_checkpointer("memory:")
    yield opened
    opened.close()


def test_a_conversations_dollar_limit_refuses_the_next_message(make_harness: Any) -> None:
    """Protects ``spend_budget_total.max_cost_usd``: a message costing $0.60 of the
    conversation's $0.50 spends it; ``limit_reached`` names it and the next message is
    refused, saying what was spent (the message itself ends `budget_exceeded`)."""
    params = HarnessParams(model="scripted:m", prices=PRICED)
    harness = make_harness(params, ScriptedProvider([reply("r1", usage=Usage(60, 0))]))
    session = harness.session(spend_budget_total=SpendBudget(max_cost_usd=0.5))
    assert session.limit_reached is None
    first = session.send_sync("m1")
    assert (first.exit_reason, first.cost_usd) == ("budget_exceeded", pytest.approx(0.6))
    assert session.limit_reached == "spend_budget_total.max_cost_usd"
    with pytest.raises(SessionLimitError) as refused:
        session.send_sync("m2")
    assert str(refused.value).endswith(
        "its spend_budget_total.max_cost_usd is spent ($0.6000 of "
        "spend_budget_total.max_cost_usd=0.5); start a new conversation, or open this one "
        "with a higher limit"
    )


def test_a_messages_token_budget_holds_under_a_dollar_only_conversation_limit(
    make_harness: Any,
) -> None:
    """Protects a message's own limits under a conversation-wide one that does not name
    them: ``spend_budget=SpendBudget(max_tokens=30)`` still ends a message at 30 tokens
    when the conversation limits only dollars (its token limit is kept, not dropped)."""
    params = HarnessParams(
        model="scripted:m",
        tools=[ToolSpec("echo", "Echo", OBJ, _echo)],
        spend_budget=SpendBudget(max_tokens=30),
        prices=PRICED,
    )
    script = [
        reply(tool_call("echo", {}, id="a"), usage=Usage(10, 5)),
        reply(tool_call("echo", {}, id="b"), usage=Usage(10, 5)),
        reply("unused"),
    ]
    session = make_harness(params, ScriptedProvider(script)).session(
        spend_budget_total=SpendBudget(max_cost_usd=100.0)
    )
    state = session.send_sync("m1")
    assert (state.exit_reason, state.usage.total_tokens, state.turns) == (
        "budget_exceeded",
        30,
        2,
    )


def test_a_resume_reads_what_another_session_object_stored(
    store: Checkpointer, make_harness: Any
) -> None:
    """Protects the store read at ``resume``: a message suspends in session ``a``;
    session ``b`` (the same conversation, another object, as another process would)
    answers it and the message ends; ``a.resume(...)`` then sees the message ended and
    refuses, saying to send the next one, instead of answering the stale question."""
    params = HarnessParams(model="scripted:m", tools=[ToolSpec("ask", "Ask", OBJ, _ask)])
    script = [reply(tool_call("ask", {}, id="q1")), reply("on main"), reply("never")]
    harness = make_harness(params, ScriptedProvider(script), checkpointer=store)
    a = harness.session("deploy")
    assert a.send_sync("deploy it").exit_reason == "suspended"
    b = harness.session("deploy")
    assert b.resume("main").run_sync().exit_reason == "model_complete"
    with pytest.raises(ResumeError) as refused:
        a.resume("main")
    assert (
        "its last message ended (model_complete) and waits for nothing; send the next "
        "message with session.send(...)" in str(refused.value)
    )
    assert a.history[-1].text == "on main"


def test_a_new_conversation_is_looked_up_in_the_store_once(
    store: Checkpointer, make_harness: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Protects the note that a conversation was read: a new stored conversation (none
    in the store) is looked up once, however often its state, history, totals or limit
    are looked at before its first message."""
    harness = make_harness(
        HarnessParams(model="scripted:m"), ScriptedProvider([]), checkpointer=store
    )
    looked: list[str] = []
    read = harness.checkpoint

    def counting(run_id: str, seq: int | None = None) -> Any:
        looked.append(run_id)
        return read(run_id, seq)

    monkeypatch.setattr(harness, "checkpoint", counting)
    session = harness.session("new-one")
    for _ in range(3):
        assert session.state is None
        assert session.history == []
        assert session.limit_reached is None
    assert looked == ["new-one"]
