"""A conversation's messages in its checkpoints (first and last of each), a fork by
message number, and a turn limit per message (``send(..., max_turns=N)``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from innerloop import HarnessParams, ParamsError, RunTree, SessionMessage
from innerloop.checkpoint import Checkpointer
from innerloop.examples import with_approval
from innerloop.testing import FakeProvider, ScriptedProvider, reply, tool_call
from innerloop.tools import ToolContext, ToolOutput, ToolSpec
from tests.checkpoint.test_session import OBJ, PARAMS, echo_model, texts


async def _delete(args: Any, ctx: ToolContext) -> ToolOutput:
    return ToolOutput(f"deleted {args['path']}")


DELETE = ToolSpec("delete", "Delete", OBJ, _delete, category="file")


def _approving(make_harness: Any, store: Checkpointer, script: list[Any]) -> Any:
    """A harness on the approval machine (its ``delete`` asks first), stored."""
    return make_harness(
        HarnessParams(model="scripted:m", tools=[DELETE]),
        ScriptedProvider(script),
        machine=with_approval(),
        checkpointer=store,
    )


def test_each_message_has_its_first_and_last_checkpoint(
    store: Checkpointer, make_harness: Any
) -> None:
    """Three messages, the second suspended and answered: each message's first checkpoint
    is it appended at the initial state, its last where it ended (the answered one's
    after its resume), one after the other."""
    script = [
        reply("hi"),
        reply(tool_call("delete", {"path": "a.log"}, id="d1")),
        reply("a.log is gone"),
        reply("bye"),
    ]
    harness = _approving(make_harness, store, script)
    session = harness.session("c1")
    assert session.messages() == []
    session.send_sync("hello")
    assert session.send_sync("remove a.log").exit_reason == "suspended"
    middle = session.messages()[1]
    assert (middle.number, middle.state) == (2, "suspended")
    session.resume(True).run_sync()
    session.send_sync("goodbye")
    infos = store.checkpoints("c1")
    starts = [i.seq for i in infos if i.source is None and i.state == "idle"]
    found = session.messages()
    assert found == [
        SessionMessage(1, starts[0], starts[1] - 1, "model_complete"),
        SessionMessage(2, starts[1], starts[2] - 1, "model_complete"),
        SessionMessage(3, starts[2], infos[-1].seq, "model_complete"),
    ]
    assert (starts[0], found[-1].last) == (1, session.seq)
    assert [store.checkpoints("c1")[m.last - 1].state for m in found] == ["model_complete"] * 3
    # a second session object reads the same from the store
    assert harness.session("c1").messages() == found


def test_a_fork_by_message_number_goes_on_from_its_end(
    store: Checkpointer, make_harness: Any
) -> None:
    """``fork(message=2)`` is ``fork(at=<message 2's last checkpoint>)``: the fork's
    history ends with the second reply; its own messages count from its first."""
    harness = make_harness(PARAMS, [FakeProvider(echo_model)], checkpointer=store)
    session = harness.session("parent")
    for text in ("one", "two", "three"):
        session.send_sync(text)
    fork = session.fork(message=2, conversation_id="fork")
    assert texts(fork.history) == ["one", "echo one", "two", "echo two"]
    assert fork.messages() == []
    fork.send_sync("other")
    assert texts(fork.history)[-2:] == ["other", "echo other"]
    assert [m.number for m in fork.messages()] == [1]
    runs = {r.run_id: r for r in harness.runs()}
    assert runs["fork"].parent_seq == session.messages()[1].last


def test_a_message_number_out_of_range_is_named(store: Checkpointer, make_harness: Any) -> None:
    """A message number the conversation does not have, 0, or one given with ``at`` is
    refused with what there is; nothing is forked."""
    harness = make_harness(PARAMS, [FakeProvider(echo_model)], checkpointer=store)
    session = harness.session("c1")
    with pytest.raises(ValueError, match="has no message yet") as none:
        session.fork(message=1)
    assert str(none.value) == (
        "fork(message=1): conversation 'c1' has no message yet; session.messages() lists them"
    )
    session.send_sync("one")
    session.send_sync("two")
    with pytest.raises(ValueError, match="has messages 1 to 2") as beyond:
        session.fork(message=3)
    assert str(beyond.value) == (
        "fork(message=3): conversation 'c1' has messages 1 to 2; session.messages() lists them"
    )
    with pytest.raises(ParamsError) as zero:
        session.fork(message=0)
    assert str(zero.value) == "message: must be an integer >= 1, got 0"
    with pytest.raises(ValueError, match="give one") as both:
        session.fork(at=1, message=1)
    assert str(both.value) == (
        "fork(at=1, message=1): give one, a checkpoint (at=) or a message number (message=)"
    )
    assert [r.run_id for r in harness.runs()] == ["c1"]


def test_without_a_store_there_are_no_stored_messages(make_harness: Any) -> None:
    """In memory, ``messages()`` and ``fork(message=...)`` say a store is needed."""
    session = make_harness(PARAMS, [FakeProvider(echo_model)]).session("mem")
    session.send_sync("one")
    with pytest.raises(ValueError, match="checkpoint store") as listing:
        session.messages()
    assert str(listing.value) == (
        "messages() reads the conversation's checkpoints; a session without a checkpoint "
        "store has none (pass Harness(..., checkpointer=...))"
    )
    with pytest.raises(ValueError, match="checkpoint store") as forking:
        session.fork(message=1)
    assert str(forking.value) == (
        "fork(message=...) names a stored message; a session without a checkpoint store "
        "forks its latest state only (message=None)"
    )


def _tool_loop(make_harness: Any, **kw: Any) -> Any:
    """A model that calls ``echo`` again and again, params' ``max_turns=3``."""
    calls = (reply(tool_call("echo", {}, id=f"e{i}")) for i in range(100))
    return make_harness(PARAMS, [FakeProvider(lambda r: next(calls))], **kw)


def test_a_message_has_its_own_turn_limit(store: Checkpointer, make_harness: Any) -> None:
    """``send(..., max_turns=1)`` ends that message after one turn
    (``max_turns_exceeded``); the next message has the params' 3 again; a limit above
    what the conversation has left is lowered to it."""
    session = _tool_loop(make_harness, checkpointer=store).session("c1", max_turns_total=6)
    state = session.send_sync("one", max_turns=1)
    assert (state.exit_reason, state.turns) == ("max_turns_exceeded", 1)
    state = asyncio.run(session.send("two"))
    assert (state.exit_reason, state.turns) == ("max_turns_exceeded", 4)
    state = session.send_sync("three", max_turns=5)  # 2 left in the conversation
    assert (state.exit_reason, state.turns) == ("max_turns_exceeded", 6)


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "2"])
def test_a_bad_turn_limit_is_refused_at_the_call(
    store: Checkpointer, make_harness: Any, bad: Any
) -> None:
    """Checked as ``HarnessParams.max_turns`` is, by ``send_sync``, ``send`` and ``start``
    alike, before anything is written."""
    session = _tool_loop(make_harness, checkpointer=store).session("c1")
    message = f"max_turns: must be None or an integer >= 1, got {bad!r}"
    calls: list[Callable[[], object]] = [
        lambda: session.send_sync("x", max_turns=bad),
        lambda: asyncio.run(session.send("x", max_turns=bad)),
        lambda: session.start("x", max_turns=bad),
    ]
    for call in calls:
        with pytest.raises(ParamsError) as info:
            call()
        assert str(info.value) == message
    assert store.runs() == []


def test_a_resumed_message_keeps_its_turn_limit(store: Checkpointer, make_harness: Any) -> None:
    """A message sent with ``max_turns=1`` that suspends for approval keeps that limit
    when this session resumes it: after the approved call it ends
    ``max_turns_exceeded``; with the params' limit it would go on."""
    script = [reply(tool_call("delete", {"path": "a.log"}, id="d1")), reply("gone")]
    session = _approving(make_harness, store, script).session("c1")
    assert session.send_sync("remove a.log", max_turns=1).exit_reason == "suspended"
    state = session.resume(True).run_sync()
    assert (state.exit_reason, state.turns) == ("max_turns_exceeded", 1)


def test_a_resumed_message_keeps_its_tree(store: Checkpointer, make_harness: Any) -> None:
    """Resumed by the session that ran it, a message's live tree holds both stretches,
    the same as the stored conversation's tree for that message; another session object
    resuming it uses the params' turn limit."""
    script = [reply(tool_call("delete", {"path": "a.log"}, id="d1")), reply("gone")]
    harness = _approving(make_harness, store, script)
    session = harness.session("c1")
    session.send_sync("remove a.log", max_turns=1)
    other = harness.session("c1").resume(True)
    assert other.resumed_from is None
    assert other.params.max_turns == harness.params.max_turns
    run = session.resume(True)  # neither was driven: this one goes on
    assert run.resumed_from is not None
    assert run.params.max_turns == 1
    run.run_sync()
    tree = RunTree.of(run)
    assert tree == RunTree.from_store(store, "c1")
    assert tree.states == (
        ("idle", "assemble", "normalize", "call", "stream", "approve", "suspended"),
        ("approve", "execute", "check", "max_turns_exceeded"),
    )
