"""Conversations: a session's messages on the three stores and in memory, per-message and
conversation-wide limits, another process, interleaving, forks, suspended messages."""

from __future__ import annotations

import asyncio
import gc
import itertools
import json
import os
import subprocess
import sys
import weakref
from pathlib import Path
from typing import Any

import pytest

from innerloop import (
    HarnessParams,
    HarnessState,
    Message,
    ResumeError,
    Session,
    SessionError,
    SessionLimitError,
    SessionTotals,
    SpendBudget,
    TextBlock,
    ToolResultBlock,
    Usage,
)
from innerloop.checkpoint import Checkpointer
from innerloop.examples import with_approval
from innerloop.fsm import DEFAULT_SPEC
from innerloop.testing import (
    FakeProvider,
    Fault,
    Reply,
    ScriptedProvider,
    assert_valid_history,
    machine_at,
    reply,
    tool_call,
)
from innerloop.tools import ToolContext, ToolOutput, ToolSpec

ROOT = Path(__file__).resolve().parents[2]
OBJ = {"type": "object"}


async def _echo(args: Any, ctx: ToolContext) -> ToolOutput:
    return ToolOutput("ok")


PARAMS = HarnessParams(
    model="scripted:m", tools=[ToolSpec("echo", "Echo", OBJ, _echo)], max_turns=3
)


class Crash(BaseException):
    """Stands for the process dying: nothing in the loop catches it."""


def texts(history: list[Message]) -> list[str]:
    return [m.text for m in history]


def last_user_text(request: Any) -> str:
    """The text the user sent last, from an Anthropic-dialect wire request."""
    content = request.payload["messages"][-1]["content"]
    if isinstance(content, str):
        return content
    return " ".join(b["text"] for b in content if b.get("type") == "text")


def echo_model(request: Any) -> Reply:
    return reply("echo " + last_user_text(request))


class TestMessages:
    def test_fifty_messages_with_a_limit_per_message(
        self, store: Checkpointer, make_harness: Any
    ) -> None:
        """50 messages in one conversation: message 25 hits max_turns (3 tool turns) and
        the next message has its own 3 turns again; the stored conversation is one run
        whose storage grows by the same bytes per message (the whole history is stored
        again once, after the cut-off message, as a compaction's would be)."""
        script: list[Any] = []
        for i in range(50):
            if i == 25:
                script += [reply(tool_call("echo", {}, id=f"c{t}")) for t in range(3)]
            else:
                script.append(reply(f"reply {i:02d}"))
        harness = make_harness(PARAMS, ScriptedProvider(script), checkpointer=store)
        session = harness.session("chat")
        sizes = [store.stored_bytes()]
        exits = []
        for i in range(50):
            state = session.send_sync(f"message {i:02d}")
            exits.append(state.exit_reason)
            sizes.append(store.stored_bytes())
        assert exits == ["model_complete"] * 25 + ["max_turns_exceeded"] + ["model_complete"] * 24
        assert_valid_history(state.history)
        # three tool calls and their results; message 26 joined the last tool results
        assert len(state.history) == 2 * 50 + 6 - 2
        assert state.history[56] == Message(
            "user", (ToolResultBlock("c2", "ok"), TextBlock("message 26"))
        )
        assert (state.turns, state.turns_at_start) == (52, 51)
        assert session.totals == SessionTotals(52, Usage(520, 260), state.cost_usd)
        (info,) = harness.runs()
        assert (info.run_id, info.status, info.exit_reason, info.turns) == (
            "chat",
            "finished",
            "model_complete",
            52,
        )
        assert session.seq == info.checkpoints
        growth = [b - a for a, b in itertools.pairwise(sizes)]
        early, late = sum(growth[2:12]), sum(growth[38:48])
        # linear: ten late messages cost what ten early ones did (plus the few bytes of a
        # longer run of resolved models in a whole checkpoint); a store of the whole
        # history per checkpoint would cost several times more
        assert late < 1.25 * early, (early, late, growth)
        # the message after the cut-off one rewrote the history once, as a new segment
        assert growth[26] > 4 * growth[27], growth
        back = harness.checkpoint("chat")
        assert back.state.history == state.history

    def test_a_conversation_goes_on_in_another_process(
        self, db_url: str, make_harness: Any
    ) -> None:
        """Two messages here; the third in a child process (the real interpreter, its own
        store connection); the fourth here again, with every message in order."""
        harness = make_harness(
            PARAMS, ScriptedProvider([reply("r1"), reply("r2"), reply("r4")]), checkpointer=db_url
        )
        session = harness.session()
        session.send_sync("m1")
        session.send_sync("m2")
        harness.checkpointer.close()
        child = subprocess.run(
            [
                sys.executable,
                "-m",
                "tests.checkpoint.session_child",
                db_url,
                session.conversation_id,
                "m3",
            ],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert child.returncode == 0, child.stderr
        report = json.loads(child.stdout)
        assert report == {
            "before": ["m1", "r1", "m2", "r2"],
            "exit_reason": "model_complete",
            "after": ["m1", "r1", "m2", "r2", "m3", "reply to m3"],
            "turns": 3,
            "turns_at_start": 2,
            "seq": 21,
        }
        again = make_harness(PARAMS, ScriptedProvider([reply("r4")]), checkpointer=db_url).session(
            session.conversation_id
        )
        state = again.send_sync("m4")
        assert texts(state.history) == [*report["after"], "m4", "r4"]
        assert (state.exit_reason, state.turns, again.seq) == ("model_complete", 4, 28)
        again.harness.checkpointer.close()

    def test_two_conversations_interleave_on_one_harness(
        self, store: Checkpointer, make_harness: Any
    ) -> None:
        """Two conversations gathered on one harness: the first message of each waits
        until the other's has reached the model, so both runs are in flight at once;
        each keeps its own history and its own run."""
        arrived = {"a": asyncio.Event(), "b": asyncio.Event()}

        async def model(request: Any) -> Reply:
            text = last_user_text(request)
            if text in ("a0", "b0"):
                arrived[text[0]].set()
                await arrived["b" if text[0] == "a" else "a"].wait()
            return reply("echo " + text)

        harness = make_harness(PARAMS, [FakeProvider(model)], checkpointer=store)

        async def talk(session: Session, tag: str) -> HarnessState:
            for i in range(4):
                state = await session.send(f"{tag}{i}")
                assert state.exit_reason == "model_complete"
            return state

        async def both() -> tuple[HarnessState, HarnessState]:
            return await asyncio.gather(
                talk(harness.session("a"), "a"), talk(harness.session("b"), "b")
            )

        a, b = asyncio.run(both())
        for tag, state in (("a", a), ("b", b)):
            expected: list[str] = []
            for i in range(4):
                expected += [f"{tag}{i}", f"echo {tag}{i}"]
            assert texts(state.history) == expected
            assert harness.session(tag).history == state.history
        assert sorted((r.run_id, r.turns) for r in harness.runs()) == [("a", 4), ("b", 4)]

    def test_a_fork_leaves_the_parent_as_it_was(
        self, store: Checkpointer, make_harness: Any
    ) -> None:
        """A fork after the second reply goes its own way; the parent's stored
        checkpoints and history are untouched, and it goes on from its own latest."""
        harness = make_harness(PARAMS, [FakeProvider(echo_model)], checkpointer=store)
        parent = harness.session("parent")
        parent.send_sync("one")
        parent.send_sync("two")
        after_two = parent.seq
        parent.send_sync("three")
        before = store.checkpoints("parent")
        child = parent.fork(at=after_two, conversation_id="child")
        assert texts(child.history) == ["one", "echo one", "two", "echo two"]
        state = child.send_sync("other")
        assert texts(state.history) == ["one", "echo one", "two", "echo two", "other", "echo other"]
        assert store.checkpoints("parent") == before
        assert texts(harness.session("parent").history) == [
            "one",
            "echo one",
            "two",
            "echo two",
            "three",
            "echo three",
        ]
        assert texts(parent.send_sync("four").history)[-2:] == ["four", "echo four"]
        runs = {r.run_id: r for r in harness.runs()}
        assert (runs["child"].parent_run_id, runs["child"].parent_seq) == ("parent", after_two)
        assert (runs["child"].turns, runs["parent"].turns) == (3, 4)


class TestInMemory:
    async def test_an_ended_message_leaves_its_state_not_its_run(self, make_harness: Any) -> None:
        """Once a message's run has ended, the session keeps its state and lets go of the
        run (its tasks, scopes, requests): with the cyclic collector off, the run is freed
        as its driver drops it; the conversation goes on from the state."""
        script = [reply("r1"), reply("r2")]
        session = make_harness(PARAMS, ScriptedProvider(script)).session("mem")
        run = session.start("m1")
        await run.run()
        gone = weakref.ref(run)
        gc.collect()
        gc.disable()
        try:
            del run
            assert session.state is not None  # a look at the conversation lets go of it
            assert gone() is None
        finally:
            gc.enable()
        assert session.state.exit_reason == "model_complete"
        assert repr(session) == "<Session 'mem' model_complete turns=1>"
        assert texts((await session.send("m2")).history) == ["m1", "r1", "m2", "r2"]

    async def test_settle_lets_go_of_an_ended_run_only(self, make_harness: Any) -> None:
        """``session.settle()`` (what a host keeping many sessions calls as each run ends)
        keeps a run that has not ended, and lets go of one that has: with the cyclic
        collector off, the ended run is freed then, no other look at the session needed."""
        session = make_harness(PARAMS, ScriptedProvider([reply("r1")])).session("mem")
        run = session.start("m1")
        gone = weakref.ref(run)
        gc.collect()
        gc.disable()
        try:
            session.settle()  # not ended yet: the session keeps it
            await run.run()
            del run
            assert gone() is not None
            session.settle()
            assert gone() is None
        finally:
            gc.enable()
        assert repr(session) == "<Session 'mem' model_complete turns=1>"

    async def test_settle_keeps_a_suspended_run(self, make_harness: Any) -> None:
        """A run suspended for an answer is kept by ``settle()``: its resume by this
        session goes on from it (``resumed_from``, the message's own ``max_turns``)."""

        async def delete(args: Any, ctx: ToolContext) -> ToolOutput:
            return ToolOutput("deleted")

        params = HarnessParams(
            model="scripted:m", tools=[ToolSpec("delete", "Delete", OBJ, delete, category="file")]
        )
        script = [reply(tool_call("delete", {"path": "a.log"}, id="d1")), reply("gone")]
        harness = make_harness(params, ScriptedProvider(script), machine=with_approval())
        session = harness.session("mem")
        run = session.start("remove a.log", max_turns=1)
        assert (await run.run()).final_state == "suspended"
        gone = weakref.ref(run)
        gc.collect()
        gc.disable()
        try:
            del run
            session.settle()
            assert gone() is not None
        finally:
            gc.enable()
        resumed = session.resume(True)
        assert resumed.resumed_from is gone()
        assert (await resumed.run()).exit_reason == "max_turns_exceeded"

    def test_messages_limits_and_a_fork_without_a_store(self, make_harness: Any) -> None:
        """Without a checkpoint store the session keeps the state: per-message limits,
        totals, a fork that copies the latest state."""
        script = [
            reply("r1"),
            *(reply(tool_call("echo", {}, id=f"c{t}")) for t in range(3)),
            reply("r3"),
            reply("fork reply"),
        ]
        session = make_harness(PARAMS, ScriptedProvider(script)).session("mem")
        assert (session.state, session.history, session.seq) == (None, [], None)
        assert session.send_sync("m1").exit_reason == "model_complete"
        assert session.send_sync("m2").exit_reason == "max_turns_exceeded"
        fork = session.fork()
        state = session.send_sync("m3")
        assert (state.exit_reason, state.turns, state.turns_at_start) == ("model_complete", 5, 4)
        assert_valid_history(state.history)
        assert fork.send_sync("m3 in the fork").history[-1].text == "fork reply"
        assert len(session.history) == len(fork.history)
        assert session.history[-1].text == "r3"
        assert repr(session) == "<Session 'mem' model_complete turns=5>"
        with pytest.raises(ValueError, match=r"fork\(at=\.\.\.\) names a stored checkpoint"):
            session.fork(at=3)

    def test_a_tool_asks_and_the_session_answers(self, make_harness: Any) -> None:
        """A tool's ctx.interrupt suspends the message; session.resume(answer) makes the
        answer its result; the next message goes on (in memory, without a store)."""

        async def ask(args: Any, ctx: ToolContext) -> ToolOutput:
            ctx.interrupt({"question": args["q"]})

        params = HarnessParams(model="scripted:m", tools=[ToolSpec("ask", "Ask", OBJ, ask)])
        script = [reply(tool_call("ask", {"q": "which branch?"}, id="q1")), reply("on main")]
        session = make_harness(params, ScriptedProvider([*script, reply("bye")])).session()
        state = session.send_sync("deploy")
        assert (state.exit_reason, state.interrupt and state.interrupt.kind) == (
            "suspended",
            "question",
        )
        with pytest.raises(ResumeError, match=r"pass answer=\.\.\."):
            session.resume()
        assert session.resume("main").run_sync().exit_reason == "model_complete"
        state = session.send_sync("thanks")
        assert state.history[2] == Message("user", (ToolResultBlock("q1", "main"),))
        assert texts(state.history)[-3:] == ["on main", "thanks", "bye"]
        assert_valid_history(state.history)

    def test_a_cut_off_message_ends_an_in_memory_conversation(self, make_harness: Any) -> None:
        """Without a store nothing can continue a message cut off mid-run: the next
        message and resume() both say so."""

        def dies(request: Any) -> Reply:
            raise Crash

        session = make_harness(PARAMS, [FakeProvider(dies)]).session("mem")
        with pytest.raises(Crash):
            session.send_sync("m1")
        with pytest.raises(SessionError) as caught:
            session.send_sync("m2")
        assert str(caught.value) == (
            "conversation 'mem': its last message's run has not ended (it is in 'call'); "
            "drive that run to its end, or, if it was cut off (a crash, a cancelled task), "
            "a session without a checkpoint store cannot continue it: start a new "
            "conversation"
        )
        with pytest.raises(ResumeError, match=r"has nothing to continue it from"):
            session.resume()


class TestLimits:
    def test_conversation_wide_turns(self, store: Checkpointer, make_harness: Any) -> None:
        """max_turns_total=5 with 3 per message: the second message has 3 left but
        wants 4, so it stops at 3 (max_turns_exceeded); then the limit is spent and a
        third message is refused, nothing written."""
        script = [
            reply(tool_call("echo", {}, id="a")),
            reply("r1"),
            *(reply(tool_call("echo", {}, id=f"b{t}")) for t in range(3)),
        ]
        harness = make_harness(PARAMS, ScriptedProvider(script), checkpointer=store)
        session = harness.session("capped", max_turns_total=5)
        assert session.send_sync("m1").exit_reason == "model_complete"
        assert session.limit_reached is None
        state = session.send_sync("m2")
        assert (state.exit_reason, state.turns) == ("max_turns_exceeded", 5)
        assert session.limit_reached == "max_turns_total"
        seq = session.seq
        with pytest.raises(SessionLimitError) as caught:
            session.send_sync("m3")
        assert str(caught.value) == (
            "conversation 'capped': its max_turns_total is spent (5 turns of "
            "max_turns_total=5); start a new conversation, or open this one with a "
            "higher limit"
        )
        assert caught.value.limit == "max_turns_total"
        assert (session.seq, len(store.checkpoints("capped"))) == (seq, seq)
        # a session opened with a higher limit goes on
        more = make_harness(PARAMS, ScriptedProvider([reply("r3")]), checkpointer=store)
        assert more.session("capped", max_turns_total=6).send_sync("m3").turns == 6

    def test_spend_budget_per_message_and_in_total(
        self, store: Checkpointer, make_harness: Any
    ) -> None:
        """spend_budget counts each message's tokens (15 a reply here); the conversation's
        total budget lowers the last message's and then refuses the next."""
        params = HarnessParams(
            model="scripted:m",
            tools=PARAMS.tools,
            spend_budget=SpendBudget(max_tokens=30),
        )
        script = [
            reply(tool_call("echo", {}, id="a")),
            reply("r1"),  # 30 tokens: the message's whole budget, and its reply
            reply("r2"),
            reply(tool_call("echo", {}, id="c")),
            reply("unused"),
        ]
        harness = make_harness(params, ScriptedProvider(script), checkpointer=store)
        session = harness.session(spend_budget_total=SpendBudget(max_tokens=60))
        first = session.send_sync("m1")
        assert (first.exit_reason, first.usage.total_tokens) == ("budget_exceeded", 30)
        assert session.send_sync("m2").exit_reason == "model_complete"
        third = session.send_sync("m3")  # 15 tokens left of the 60
        assert (third.exit_reason, third.usage.total_tokens) == ("budget_exceeded", 60)
        assert session.limit_reached == "spend_budget_total.max_tokens"
        with pytest.raises(SessionLimitError, match=r"60 tokens of spend_budget_total"):
            session.send_sync("m4")

    def test_limits_are_checked_when_the_session_is_made(self, make_harness: Any) -> None:
        """A bad limit is a ParamsError naming it."""
        harness = make_harness(PARAMS, ScriptedProvider([]))
        with pytest.raises(
            ValueError, match=r"max_turns_total: must be None or an integer >= 1, got 0"
        ):
            harness.session(max_turns_total=0)

    def test_turn_limit_counts_from_the_run_start(self) -> None:
        """The guards read the run's own turns: 5 turns in all, 3 of them before this run,
        is 2 of max_turns=2 (stop) and 1 of 2 when 4 came before (go on)."""
        params = HarnessParams(model="scripted:scripted-model", max_turns=2)
        spent = HarnessState(turns=5, turns_at_start=3)
        assert machine_at(DEFAULT_SPEC, "assemble", spent, params).step() == "max_turns_exceeded"
        left = HarnessState(turns=5, turns_at_start=4, history=[Message.user("go")])
        assert machine_at(DEFAULT_SPEC, "assemble", left, params).step() == "normalize"

    def test_start_with_an_earlier_state_is_a_run_of_its_own(self, make_harness: Any) -> None:
        """Harness.start(prompt, state=earlier) gets its own max_turns (the counters of the
        state go on)."""
        harness = make_harness(
            HarnessParams(model="scripted:m", max_turns=1),
            ScriptedProvider([reply("one"), reply("two")]),
        )
        first = harness.run_sync("a")
        second = harness.run_sync("b", state=first)
        assert (second.exit_reason, second.turns, second.turns_at_start) == (
            "model_complete",
            2,
            1,
        )


class TestBetweenMessages:
    def test_an_approval_machine_in_a_conversation(
        self, store: Checkpointer, make_harness: Any
    ) -> None:
        """with_approval(): a message suspends for approval; a new message is refused
        until session.resume(answer) has run it to its end; then the conversation goes on."""
        ran: list[str] = []

        async def delete(args: Any, ctx: ToolContext) -> ToolOutput:
            ran.append(args["path"])
            return ToolOutput(f"deleted {args['path']}")

        params = HarnessParams(
            model="scripted:m", tools=[ToolSpec("delete", "Delete", OBJ, delete, category="file")]
        )
        script = [
            reply(tool_call("delete", {"path": "a.log"}, id="d1")),
            reply("a.log is gone"),
            reply("hello"),
        ]
        harness = make_harness(
            params, ScriptedProvider(script), machine=with_approval(), checkpointer=store
        )
        session = harness.session("approve")
        assert session.send_sync("remove a.log").exit_reason == "suspended"
        with pytest.raises(SessionError) as caught:
            session.send_sync("hi")
        assert str(caught.value) == (
            "conversation 'approve': its last message is suspended on a 'approval' "
            "interrupt; answer it with session.resume(answer) (then drive the run), then "
            "send the next message"
        )
        assert ran == []
        # another process (a second session object) answers it
        state = harness.session("approve").resume(True).run_sync()
        assert (state.exit_reason, ran) == ("model_complete", ["a.log"])
        state = session.send_sync("hi")
        assert texts(state.history)[-3:] == ["a.log is gone", "hi", "hello"]
        assert_valid_history(state.history)
        with pytest.raises(ResumeError, match=r"its last message ended \(model_complete\)"):
            session.resume(True)

    def test_a_failed_message_is_followed_by_the_next(
        self, store: Checkpointer, make_harness: Any
    ) -> None:
        """A message whose model call fails ends in ``failed`` with no reply; the next
        message joins the unanswered one, so roles keep alternating."""
        script: list[Reply | Fault] = [Fault.fatal(400, "bad request"), reply("answered both")]
        harness = make_harness(PARAMS, ScriptedProvider(script), checkpointer=store)
        session = harness.session()
        assert session.send_sync("first").exit_reason == "failed"
        state = session.send_sync("second")
        assert state.exit_reason == "model_complete"
        assert state.history == [
            Message("user", (TextBlock("first"), TextBlock("second"))),
            Message.assistant("answered both"),
        ]
        assert_valid_history(state.history)

    def test_a_cut_off_message_is_resumed_before_the_next(
        self, db_url: str, make_harness: Any
    ) -> None:
        """The process dies while a message's model call opens: a new session on the
        conversation refuses the next message and resumes the cut-off one from its
        latest checkpoint, then takes the next."""
        calls: list[str] = []

        def dies(request: Any) -> Reply:
            calls.append(last_user_text(request))
            if len(calls) == 2:
                raise Crash
            return reply("r1")

        first = make_harness(PARAMS, [FakeProvider(dies)], checkpointer=db_url)
        session = first.session("cut")
        session.send_sync("m1")
        with pytest.raises(Crash):
            session.send_sync("m2")
        with pytest.raises(SessionError, match=r"has not ended \(it is in 'call'\)"):
            session.send_sync("m3")
        first.checkpointer.close()

        second = make_harness(
            PARAMS, ScriptedProvider([reply("r2"), reply("r3")]), checkpointer=db_url
        )
        again = second.session("cut")
        with pytest.raises(SessionError, match=r"session\.resume\(\) continues it"):
            again.send_sync("m3")
        assert again.resume().run_sync().exit_reason == "model_complete"
        state = again.send_sync("m3")
        assert texts(state.history) == ["m1", "r1", "m2", "r2", "m3", "r3"]
        second.checkpointer.close()

    def test_a_second_session_object_goes_on_after_the_first(
        self, store: Checkpointer, make_harness: Any
    ) -> None:
        """Two session objects on one conversation: the one that read it before the other
        wrote goes on after the other's message (its first write is refused, nothing is
        written, and it reads the conversation again)."""
        harness = make_harness(PARAMS, [FakeProvider(echo_model)], checkpointer=store)
        one, two = harness.session("shared"), harness.session("shared")
        one.send_sync("from one")
        assert texts(two.history) == ["from one", "echo from one"]
        one.send_sync("one again")
        state = two.send_sync("from two")
        assert texts(state.history) == [
            "from one",
            "echo from one",
            "one again",
            "echo one again",
            "from two",
            "echo from two",
        ]

    def test_only_user_messages(self, make_harness: Any) -> None:
        """An assistant message is refused with the fix."""
        session = make_harness(PARAMS, ScriptedProvider([])).session()
        with pytest.raises(ValueError, match=r"takes user messages, got a 'assistant' one"):
            session.start(Message.assistant("hi"))
