"""Checkpoints on the three stores: what is written, resume, fork, listing, bad input."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from innerloop import Harness, HarnessParams, Message, ResumeError, ToolResultBlock
from innerloop.checkpoint import (
    MIGRATIONS,
    CheckpointCorrupt,
    Checkpointer,
    CheckpointError,
    CheckpointSchemaError,
    CheckpointWriter,
    PostgresCheckpointer,
    SQLiteCheckpointer,
    UnknownRunError,
    open_checkpointer,
)
from innerloop.fsm import HarnessState
from innerloop.testing import (
    FakeProvider,
    ScriptedProvider,
    assert_valid_history,
    reply,
    tool_call,
)
from innerloop.tools import ToolContext, ToolOutput, ToolSpec
from tests.checkpoint.conftest import fresh_database

OBJ = {"type": "object"}
SLOW_TRIGGER = (
    "CREATE FUNCTION slow_insert() RETURNS trigger LANGUAGE plpgsql AS "
    "$$ BEGIN PERFORM pg_sleep(0.3); RETURN NULL; END $$; "
    "CREATE TRIGGER slow AFTER INSERT ON innerloop_checkpoints "
    "FOR EACH STATEMENT EXECUTE FUNCTION slow_insert()"
)
"""Makes each commit of checkpoints on PostgreSQL take 0.3 s more (a slow round trip)."""
TURN = ["assemble", "normalize", "call", "stream", "execute", "check"]


class Crash(BaseException):
    """Stands for the process dying: nothing in the loop catches it."""


def echo_tool(ran: list[str]) -> ToolSpec:
    async def echo(args: Any, ctx: ToolContext) -> ToolOutput:
        ran.append(args["x"])
        return ToolOutput("echo:" + args["x"])

    return ToolSpec("echo", "Echo x", OBJ, echo)


def ask_tool() -> ToolSpec:
    async def ask(args: Any, ctx: ToolContext) -> ToolOutput:
        ctx.interrupt({"question": args["q"]})

    return ToolSpec("ask", "Ask the user", OBJ, ask)


def params(ran: list[str]) -> HarnessParams:
    return HarnessParams(model="scripted:m", tools=[echo_tool(ran), ask_tool()])


def two_turns() -> list[Any]:
    return [
        reply("one", tool_call("echo", {"x": "a"}, id="c1")),
        reply("two", tool_call("echo", {"x": "b"}, id="c2")),
        reply("done"),
    ]


class TestWriting:
    def test_every_transition(self, store: Checkpointer, make_harness: Any) -> None:
        """One checkpoint per transition (and one at the start), each reading back as the
        run was then; the history grows by the messages of each step only."""
        harness = make_harness(params([]), ScriptedProvider(two_turns()), checkpointer=store)
        run = harness.start("go")
        final = run.run_sync()
        infos = store.checkpoints(run.run_id)
        assert [i.state for i in infos] == [
            "idle",
            *TURN,
            *TURN,
            "assemble",
            "normalize",
            "call",
            "stream",
            "check",
            "model_complete",
        ]
        assert [i.seq for i in infos] == list(range(1, 20))
        assert {i.history_start for i in infos} == {0}
        for info in infos:
            back = harness.checkpoint(run.run_id, info.seq)
            assert back.state.history == final.history[: info.history_len]
        last = harness.checkpoint(run.run_id)
        assert last.state.exit_reason == "model_complete"
        assert last.state.usage == final.usage
        assert_valid_history(last.state.history)

    @pytest.mark.parametrize(
        ("every", "states"),
        [
            ("turn", ["idle", "assemble", "assemble", "assemble", "model_complete"]),
            ("final", ["idle", "model_complete"]),
        ],
    )
    def test_policies(
        self, store: Checkpointer, make_harness: Any, every: str, states: list[str]
    ) -> None:
        """'turn' writes when a turn starts and at the end; 'final' only at the end."""
        harness = make_harness(
            params([]), ScriptedProvider(two_turns()), checkpointer=store, checkpoint_every=every
        )
        run = harness.start("go")
        run.run_sync()
        assert [i.state for i in store.checkpoints(run.run_id)] == states

    def test_storage_is_linear_over_1000_turns(self, store: Checkpointer) -> None:
        """1,000 turns checkpointed at every step: each quarter adds the same bytes
        (messages are stored once; a checkpoint names a history length)."""
        store.create_run("long", "innerloop")
        writer = CheckpointWriter(store, "long")
        state = HarnessState(history=[Message.user("go")])
        sizes = []
        for turn in range(1000):
            if turn % 250 == 0:
                sizes.append(store.stored_bytes())
            state.history.append(
                Message.assistant([tool_call("echo", {"x": f"t{turn:04d}"}, id=f"c{turn:04d}")])
            )
            writer.save(state, "stream", "call", "call_opened")
            writer.save(state, "execute", "stream", "has_tool_calls")
            state.history.append(Message("user", (ToolResultBlock(f"c{turn:04d}", "ok"),)))
            state.turns += 1
            writer.save(state, "check", "execute", None)
            writer.save(state, "assemble", "check", None)
        sizes.append(store.stored_bytes())
        quarters = [b - a for a, b in itertools.pairwise(sizes)]
        assert max(quarters) < 1.05 * min(quarters), quarters
        one = json.dumps(state.history[1].to_dict()) if hasattr(state.history[1], "to_dict") else ""
        # a quadratic store (the whole history per checkpoint) would hold ~4,000 x 1,000
        # messages; this one holds each of the 2,001 once plus a constant per checkpoint
        assert sizes[-1] < 4000 * 1500 + 2001 * max(len(one), 200)
        back = decode_latest(store, "long")
        assert back.history == state.history

    def test_a_message_changed_in_place_starts_a_new_segment(self, store: Checkpointer) -> None:
        """A host that redacts a message in the middle of the history, in place (the first
        and the last message unchanged), is checkpointed with the redaction: the stored
        segment is not taken for extended because its ends are the same objects."""
        store.create_run("r", "innerloop")
        writer = CheckpointWriter(store, "r")
        msgs = [Message.user("u0"), Message.assistant("a0"), Message.user("u1")]
        state = HarnessState(history=list(msgs))
        writer.save(state, "assemble")
        state.history[1] = Message.assistant("[redacted]")
        writer.save(state, "check")
        state.history.append(Message.assistant("a1"))
        writer.save(state, "check")
        infos = store.checkpoints("r")
        assert [(i.history_start, i.history_len) for i in infos] == [(0, 3), (3, 3), (3, 4)]
        assert decode_at(store, "r", 1).history == msgs
        assert decode_latest(store, "r").history == [
            msgs[0],
            Message.assistant("[redacted]"),
            msgs[2],
            Message.assistant("a1"),
        ]

    def test_compaction_starts_a_new_segment(self, store: Checkpointer) -> None:
        """A rewritten history (compaction) is written once as a new segment; later
        checkpoints extend it, earlier ones still read their own history."""
        store.create_run("r", "innerloop")
        writer = CheckpointWriter(store, "r")
        msgs = [Message.user("u0"), Message.assistant("a0"), Message.user("u1")]
        state = HarnessState(history=list(msgs))
        writer.save(state, "assemble")
        state.history = [Message.user("summary"), msgs[2]]
        writer.save(state, "assemble")
        state.history.append(Message.assistant("a1"))
        writer.save(state, "check")
        infos = store.checkpoints("r")
        assert [(i.history_start, i.history_len) for i in infos] == [(0, 3), (3, 2), (3, 3)]
        assert decode_at(store, "r", 1).history == msgs
        assert decode_at(store, "r", 3).history == [
            Message.user("summary"),
            msgs[2],
            Message.assistant("a1"),
        ]


def decode_latest(store: Checkpointer, run_id: str) -> HarnessState:
    from innerloop.checkpoint import decode

    return decode(store.rows(run_id)).state


def decode_at(store: Checkpointer, run_id: str, seq: int) -> HarnessState:
    from innerloop.checkpoint import decode

    return decode(store.rows(run_id, seq)).state


class TestResume:
    def test_suspended_run_resumes_in_another_process(self, db_url: str, make_harness: Any) -> None:
        """A run suspended on a question is resumed by id through a second store object
        (as another process would): the answer is the tool result, the history valid."""
        first = make_harness(
            params([]),
            ScriptedProvider([reply(tool_call("ask", {"q": "branch?"}, id="a1"))]),
            checkpointer=db_url,
        )
        run = first.start("go")
        assert run.run_sync().exit_reason == "suspended"
        assert [r.status for r in first.runs()] == ["suspended"]
        first.checkpointer.close()

        provider = ScriptedProvider([reply("on main")])
        second = make_harness(params([]), provider, checkpointer=db_url)
        state = second.resume(run.run_id, answer="main").run_sync()
        assert state.exit_reason == "model_complete"
        assert state.history[2] == Message("user", (ToolResultBlock("a1", "main"),))
        assert_valid_history(state.history)
        (info,) = second.runs()
        assert (info.run_id, info.status, info.exit_reason, info.turns) == (
            run.run_id,
            "finished",
            "model_complete",
            2,
        )
        back = second.checkpoint(run.run_id)
        assert back.state.history == state.history
        second.checkpointer.close()

    def test_crashed_run_resumes_without_rerunning_checkpointed_tools(
        self, db_url: str, make_harness: Any
    ) -> None:
        """The process dies while the second model call opens; a new harness resumes
        from the last checkpoint: turn 1's tool call is not run again, nothing is lost."""
        ran: list[str] = []
        script = two_turns()

        def first_calls(request: Any) -> Any:
            if len(calls) == 1:
                raise Crash
            calls.append(request)
            return script[0]

        calls: list[Any] = []
        first = make_harness(params(ran), [FakeProvider(first_calls)], checkpointer=db_url)
        run = first.start("go")
        with pytest.raises(Crash):
            run.run_sync()
        assert ran == ["a"]
        (info,) = first.runs()
        assert (info.status, info.state) == ("running", "call")
        first.checkpointer.close()

        second = make_harness(params(ran), ScriptedProvider(script[1:]), checkpointer=db_url)
        state = second.resume(run.run_id).run_sync()
        assert state.exit_reason == "model_complete"
        assert ran == ["a", "b"]
        assert [m.role for m in state.history] == ["user", "assistant"] * 3
        assert_valid_history(state.history)
        assert state.turns == 3
        second.checkpointer.close()


class TestGroupCommit:
    def test_committed_before_every_external_effect(self, db_url: str, make_harness: Any) -> None:
        """With group commit, a reader on another connection sees, when a model request
        is sent, every checkpoint up to the call's, and when a tool runs, up to the
        ``execute`` one that names its call; the effect-free steps between are committed
        with the next barrier, and the run's 19 checkpoints are all stored."""
        reader = open_checkpointer(db_url)
        seen: list[tuple[str, int, str]] = []

        def committed(what: str) -> None:
            (info,) = [r for r in reader.runs() if r.run_id == "g"]
            seen.append((what, info.checkpoints, info.state))

        ran: list[str] = []
        script = iter(two_turns())

        def model(request: Any) -> Any:
            committed("model")
            return next(script)

        async def echo(args: Any, ctx: ToolContext) -> ToolOutput:
            committed("tool")
            ran.append(args["x"])
            return ToolOutput("echo:" + args["x"])

        tools = HarnessParams(model="scripted:m", tools=[ToolSpec("echo", "Echo x", OBJ, echo)])
        harness = make_harness(tools, [FakeProvider(model)], checkpointer=db_url)
        run = harness.start("go", run_id="g")
        assert run.on_step is not None
        hook = run.on_step
        commits: list[tuple[str, int]] = []

        def step(run: Any, transition: Any) -> Any:
            after = hook(run, transition)

            async def then() -> None:
                if after is not None:
                    await after  # the commit, when the store commits off the loop
                if hook.pending == 0:
                    commits.append((transition.target, hook.seq))

            return then()

        run.on_step = step
        run.run_sync()
        assert seen == [
            ("model", 4, "call"),
            ("tool", 6, "execute"),
            ("model", 10, "call"),
            ("tool", 12, "execute"),
            ("model", 16, "call"),
        ]
        assert commits == [
            ("call", 4),
            ("execute", 6),
            ("call", 10),
            ("execute", 12),
            ("call", 16),
            ("model_complete", 19),
        ]
        assert [i.seq for i in reader.checkpoints("g")] == list(range(1, 20))
        assert ran == ["a", "b"]
        reader.close()
        harness.checkpointer.close()

    def test_each_commits_every_checkpoint_at_once(
        self, store: Checkpointer, make_harness: Any
    ) -> None:
        """``checkpoint_commit="each"``: nothing waits; every step's checkpoint is
        committed before the next handler runs."""
        harness = make_harness(
            params([]),
            ScriptedProvider(two_turns()),
            checkpointer=store,
            checkpoint_commit="each",
        )
        run = harness.start("go")
        assert run.on_step is not None
        hook = run.on_step
        waiting: list[int] = []

        def step(run: Any, transition: Any) -> Any:
            after = hook(run, transition)

            async def then() -> None:
                if after is not None:
                    await after
                waiting.append(hook.pending)

            return then()

        run.on_step = step
        run.run_sync()
        assert waiting == [0] * 18
        assert len(store.checkpoints(run.run_id)) == 19

    def test_a_failed_commit_fails_the_run(self, store: Checkpointer, make_harness: Any) -> None:
        """Another writer took checkpoint 2 while the run's first group waited: the
        group's commit at the model call is refused whole, the run raises the store's
        error before the model is asked, and the other writer's row stays."""
        calls: list[Any] = []

        def model(request: Any) -> Any:
            calls.append(request)
            return reply("done")

        harness = make_harness(params([]), [FakeProvider(model)], checkpointer=store)
        run = harness.start("go", run_id="r")
        other = CheckpointWriter(store, "r", seq=1, segment=run.state.history)
        other.save(run.state, "idle")
        writer = run.on_step
        assert isinstance(writer, CheckpointWriter)
        with pytest.raises(CheckpointError, match=r"^checkpoint 2 of run 'r' is already in "):
            run.run_sync()
        assert calls == []
        assert [(i.seq, i.state) for i in store.checkpoints("r")] == [(1, "idle"), (2, "idle")]
        # the writer went back to its last committed checkpoint, nothing left pending
        assert (writer.seq, writer.pending) == (1, 0)

    @pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
    def test_a_slow_commit_holds_the_loop_only_on_sqlite(
        self, request: pytest.FixtureRequest, tmp_path: Path, make_harness: Any, kind: str
    ) -> None:
        """PostgreSQL commits on the loop's asynchronous connection: the loop serves other
        tasks while a commit waits for the server (here a trigger sleeps 0.3 s in each).
        SQLite commits on the loop, in the step (a local commit is quicker than any hop):
        a commit that takes 0.3 s holds the loop as long."""
        store: Checkpointer
        if kind == "postgresql":
            url = fresh_database(request.getfixturevalue("pg_server"))
            store = open_checkpointer(url)
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(SLOW_TRIGGER)
        else:

            class SlowStore(SQLiteCheckpointer):
                def write(self, checkpoints: Any) -> None:
                    time.sleep(0.3)
                    super().write(checkpoints)

            store = SlowStore(tmp_path / "runs.db")
        harness = make_harness(params([]), ScriptedProvider([reply("done")]), checkpointer=store)
        run = harness.start("go")
        gaps: list[float] = []

        async def main() -> None:
            done = False

            async def tick() -> None:
                last = time.monotonic()
                while not done:
                    await asyncio.sleep(0.01)
                    now = time.monotonic()
                    gaps.append(now - last)
                    last = now

            ticker = asyncio.create_task(tick())
            await asyncio.sleep(0.05)
            started = time.monotonic()
            await run.run()
            took = time.monotonic() - started
            done = True
            await ticker
            assert took >= 0.6, took  # two commits (call, then the final state), waited for

        asyncio.run(main())
        assert run.state.exit_reason == "model_complete"
        assert len(store.checkpoints(run.run_id)) == 7
        if kind == "postgresql":
            assert max(gaps) < 0.25, max(gaps)
        else:
            assert max(gaps) >= 0.3, max(gaps)
        store.close()

    def test_unknown_commit_mode(self, store: Checkpointer) -> None:
        with pytest.raises(ValueError, match=r"^commit='later': use 'barrier'"):
            CheckpointWriter(store, "r", commit="later")  # type: ignore[arg-type]


class TestFork:
    def test_fork_from_an_earlier_checkpoint(self, store: Checkpointer, make_harness: Any) -> None:
        """A fork starts from checkpoint `at` with an edit; the parent is left intact and
        the child records its parent."""
        harness = make_harness(params([]), ScriptedProvider(two_turns()), checkpointer=store)
        parent = harness.start("go")
        parent.run_sync()
        before = store.checkpoints(parent.run_id)
        at = next(i.seq for i in before if i.state == "assemble" and i.history_len == 3)

        def edit(state: HarnessState) -> None:
            state.history[2] = Message("user", (ToolResultBlock("c1", "edited"),))

        harness.providers["scripted"] = ScriptedProvider([reply("after the edit")])
        child = harness.fork(parent.run_id, at=at, edit=edit, new_run_id="child")
        state = child.run_sync()
        assert state.exit_reason == "model_complete"
        assert state.history[2] == Message("user", (ToolResultBlock("c1", "edited"),))
        assert state.history[-1] == Message.assistant("after the edit")
        assert store.checkpoints(parent.run_id) == before
        runs = {r.run_id: r for r in harness.runs()}
        assert (runs["child"].parent_run_id, runs["child"].parent_seq) == (parent.run_id, at)
        assert harness.checkpoint(parent.run_id).state.history[2] == Message(
            "user", (ToolResultBlock("c1", "echo:a"),)
        )

    def test_fork_a_finished_run_with_a_new_message(
        self, store: Checkpointer, make_harness: Any
    ) -> None:
        """From a final checkpoint a fork starts a new turn; it needs a user message."""
        harness = make_harness(
            params([]), ScriptedProvider([reply("hi"), reply("again")]), checkpointer=store
        )
        parent = harness.start("go")
        parent.run_sync()
        with pytest.raises(ResumeError, match="edit= must end the history with a user message"):
            harness.fork(parent.run_id)
        child = harness.fork(parent.run_id, edit=lambda s: s.history.append(Message.user("more")))
        state = child.run_sync()
        assert [m.text for m in state.history] == ["go", "hi", "more", "again"]
        assert len(harness.runs()) == 2


class TestBadInput:
    def test_unknown_run(self, store: Checkpointer, make_harness: Any) -> None:
        """An unknown run id names itself and how to list the runs."""
        harness = make_harness(params([]), ScriptedProvider([]), checkpointer=store)
        with pytest.raises(UnknownRunError) as err:
            harness.resume("nope")
        assert str(err.value) == (
            "no run 'nope' in the checkpoint store; `innerloop runs list --db URL` "
            "(or harness.runs()) lists the runs it holds"
        )

    def test_unknown_checkpoint(self, store: Checkpointer, make_harness: Any) -> None:
        """A checkpoint number past the last names the range."""
        harness = make_harness(params([]), ScriptedProvider([reply("hi")]), checkpointer=store)
        run = harness.start("go", run_id="r1")
        run.run_sync()
        with pytest.raises(
            UnknownRunError, match=r"^run 'r1' has no checkpoint 99; its checkpoints are 1 to 7"
        ):
            harness.fork("r1", at=99)

    def test_resume_finished_run(self, store: Checkpointer, make_harness: Any) -> None:
        """A finished run cannot be resumed; the error says to fork it."""
        harness = make_harness(params([]), ScriptedProvider([reply("hi")]), checkpointer=store)
        harness.start("go", run_id="r1").run_sync()
        with pytest.raises(ResumeError) as err:
            harness.resume("r1")
        assert str(err.value) == (
            "run 'r1': it finished (model_complete); fork it from an earlier checkpoint to "
            "run again from there"
        )
        assert len(store.checkpoints("r1")) == 7

    def test_answer_to_a_run_that_is_not_suspended(
        self, store: Checkpointer, make_harness: Any
    ) -> None:
        """A run that stopped mid-way takes no answer; nothing is written."""
        harness = make_harness(params([]), ScriptedProvider([]), checkpointer=store)
        harness.start("go", run_id="r1")
        with pytest.raises(ResumeError, match=r"^run 'r1': it is not suspended \(it is running"):
            harness.resume("r1", answer="yes")
        assert len(store.checkpoints("r1")) == 1

    def test_duplicate_run_id(self, store: Checkpointer, make_harness: Any) -> None:
        harness = make_harness(params([]), ScriptedProvider([]), checkpointer=store)
        harness.start("go", run_id="r1")
        with pytest.raises(
            CheckpointError, match=r"a run 'r1' is already in .*; pick another run id"
        ):
            harness.start("go", run_id="r1")

    def test_corrupt_row(self, tmp_path: Path, make_harness: Any) -> None:
        """A checkpoint row that is not JSON is named, with the earlier one to fork from;
        the row is left as it is."""
        url = tmp_path / "runs.db"
        harness = make_harness(params([]), ScriptedProvider([reply("hi")]), checkpointer=url)
        harness.start("go", run_id="r1").run_sync()
        store = harness.checkpointer
        assert isinstance(store, SQLiteCheckpointer)
        store._conn.execute("UPDATE innerloop_checkpoints SET data = '{torn' WHERE seq = 7")
        with pytest.raises(CheckpointCorrupt) as err:
            harness.resume("r1")
        assert str(err.value).startswith(
            "checkpoint 7 of run 'r1' cannot be read: JSONDecodeError: "
        )
        assert str(err.value).endswith(
            "; the row was left as it is; fork from an earlier checkpoint (at=6)"
        )
        assert store._conn.execute(
            "SELECT data FROM innerloop_checkpoints WHERE seq = 7"
        ).fetchone() == ("{torn",)
        assert harness.checkpoint("r1", 6).state.history[0] == Message.user("go")

    def test_missing_message_rows(self, tmp_path: Path, make_harness: Any) -> None:
        """A checkpoint whose messages are not all there is corrupt, not half-read."""
        harness = make_harness(
            params([]), ScriptedProvider([reply("hi")]), checkpointer=tmp_path / "r.db"
        )
        harness.start("go", run_id="r1").run_sync()
        store = harness.checkpointer
        assert isinstance(store, SQLiteCheckpointer)
        store._conn.execute("DELETE FROM innerloop_messages WHERE idx = 1")
        with pytest.raises(
            CheckpointCorrupt, match="it names 2 messages from index 0, 1 are stored"
        ):
            harness.checkpoint("r1")

    def test_newer_schema_refused(self, tmp_path: Path) -> None:
        """A store written by a newer innerloop is refused and left as it is."""
        path = tmp_path / "runs.db"
        SQLiteCheckpointer(path).close()
        import contextlib
        import sqlite3

        with contextlib.closing(sqlite3.connect(path)) as conn, conn:
            conn.execute("UPDATE innerloop_meta SET value = '7' WHERE key = 'schema_version'")
        before = path.read_bytes()
        with pytest.raises(CheckpointSchemaError) as err:
            SQLiteCheckpointer(path)
        assert str(err.value) == (
            f"SQLite file {path} has checkpoint schema version 7, newer than the 3 this "
            "innerloop reads; upgrade innerloop (the store was left as it is)"
        )
        assert path.read_bytes() == before

    def test_migration_path(self, tmp_path: Path, make_harness: Any) -> None:
        """An older store is migrated when a newer innerloop opens it; its runs still
        read back."""
        path = tmp_path / "runs.db"
        harness = make_harness(params([]), ScriptedProvider([reply("hi")]), checkpointer=path)
        harness.start("go", run_id="r1").run_sync()
        harness.checkpointer.close()

        class V4(SQLiteCheckpointer):
            version = 4
            migrations = (*MIGRATIONS, (4, ("ALTER TABLE innerloop_runs ADD COLUMN tag TEXT",)))

        v4 = V4(path)
        assert v4._conn.execute("SELECT value FROM innerloop_meta").fetchone() == ("4",)
        assert v4._conn.execute("SELECT tag FROM innerloop_runs").fetchone() == (None,)
        assert [r.run_id for r in v4.runs()] == ["r1"]
        v4.close()
        with pytest.raises(CheckpointSchemaError, match="version 4, newer than the 3"):
            SQLiteCheckpointer(path)

    def test_version_1_store_migrated(self, tmp_path: Path, make_harness: Any) -> None:
        """A store written before runs recorded their machine is migrated to the newest
        version; its runs read back with no machine record, and resume without a check."""
        path = tmp_path / "runs.db"

        class V1(SQLiteCheckpointer):
            version = 1
            migrations = MIGRATIONS[:1]

        V1(path).close()
        import contextlib
        import sqlite3

        with contextlib.closing(sqlite3.connect(path)) as conn, conn:
            conn.execute(
                "INSERT INTO innerloop_runs (run_id, machine, created) "
                "VALUES ('r1', 'innerloop', 0)"
            )
        store = SQLiteCheckpointer(path)
        assert store._conn.execute("SELECT value FROM innerloop_meta").fetchone() == ("3",)
        assert store.machine("r1") is None
        (info,) = store.runs()
        assert (info.run_id, info.fingerprint, info.import_path) == ("r1", None, None)
        store.close()

    def test_no_store(self, make_harness: Any) -> None:
        harness = make_harness(params([]), ScriptedProvider([]))
        with pytest.raises(
            ResumeError,
            match=r"^resume by run id needs a checkpoint store; pass "
            r"Harness\(\.\.\., checkpointer='sqlite:///runs.db'\)",
        ):
            harness.resume("r1")

    def test_bad_url(self) -> None:
        with pytest.raises(
            ValueError,
            match=r"^unknown checkpoint store URL 'mysql://x'; use sqlite:///path/runs.db, "
            r"postgresql://user@host/db or memory:$",
        ):
            open_checkpointer("mysql://x")


def test_no_credential_is_stored(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run through the real Anthropic provider (loopback server) with an API key: the
    key is nowhere in the store."""
    from innerloop.providers import AnthropicProvider
    from innerloop.testing import AnthropicServer

    key = "sk-ant-api03-SECRET-4711-do-not-store"
    script = [reply(tool_call("echo", {"x": "a"}, id="c1")), reply("done")]
    with AnthropicServer(script) as server:
        provider = AnthropicProvider(api_key=key, base_url=server.base_url)
        p = HarnessParams(model="anthropic:claude-sonnet-4-5-20250929", tools=[echo_tool([])])
        harness = Harness(p, [provider], checkpointer=db_url)
        state = harness.start("go", run_id="r1").run_sync()
    assert state.exit_reason == "model_complete"
    store = harness.checkpointer
    assert store is not None
    dump = everything_stored(store)
    assert "echo:a" in dump  # the dump does hold the run
    assert key not in dump
    assert "SECRET-4711" not in dump
    store.close()


def everything_stored(store: Checkpointer) -> str:
    conn: Any = store._conn  # type: ignore[attr-defined]
    rows = []
    for table in (
        "innerloop_meta",
        "innerloop_runs",
        "innerloop_messages",
        "innerloop_checkpoints",
    ):
        cur = conn.execute(f"SELECT * FROM {table}")
        rows += [repr(r) for r in cur.fetchall()]
    return "\n".join(rows)


def test_every_checkpoint_reads_back_across_whole_ones(store: Checkpointer) -> None:
    """150 checkpoints (whole ones every 64, deltas between): each reads back as the
    state was when it was written, whatever changed (scalars, grown lists, edited dicts,
    replaced objects, a list that shrank)."""
    from innerloop._convert import unstructure
    from innerloop.fsm import Task

    store.create_run("d", "innerloop")
    writer = CheckpointWriter(store, "d")
    state = HarnessState(history=[Message.user("go")])
    expected = []
    for i in range(150):
        state.turns = i // 3
        state.resolved_models.append(f"m{i}")
        if i % 5 == 0:
            state.tasks.append(Task(f"t{i}", "do it"))
        if i % 7 == 0 and state.tasks:
            state.tasks[0].done = not state.tasks[0].done
        state.notes["n"] = {"i": i, "even": i % 2 == 0}
        state.errors["transient"] = i // 10
        if i == 100:
            state.resolved_models = ["reset"]
        if i % 2:
            state.history.append(Message.assistant(f"a{i}"))
        else:
            state.history.append(Message.user(f"u{i}"))
        writer.save(state, "check")
        expected.append(unstructure(state))
    for seq, want in enumerate(expected, start=1):
        assert unstructure(decode_at(store, "d", seq)) == want, seq


def test_a_second_writer_overwrites_nothing(store: Checkpointer) -> None:
    """Two writers of one run (two processes resuming it at once): the second one's
    checkpoint is refused, the first one's stays; a run never created takes none."""
    store.create_run("r", "innerloop")
    first = CheckpointWriter(store, "r")
    first.save(HarnessState(history=[Message.user("first")]), "assemble")
    second = CheckpointWriter(store, "r")
    with pytest.raises(CheckpointError, match=r"^checkpoint 1 of run 'r' is already in "):
        second.save(HarnessState(history=[Message.user("second")]), "assemble")
    assert decode_latest(store, "r").history == [Message.user("first")]
    with pytest.raises(UnknownRunError, match=r"^no run 'ghost' in the checkpoint store"):
        CheckpointWriter(store, "ghost").save(HarnessState(), "assemble")


class TestPostgresConnections:
    """A run commits through an asynchronous connection of its event loop, opened at its
    first commit and closed when that loop ends, or by ``store.close()``."""

    @pytest.fixture
    def url(self, pg_server: Any) -> str:
        return fresh_database(pg_server)

    @staticmethod
    def backends(url: str, settled: int | None = None) -> int:
        """Connections to the database other than the one asking; with ``settled``, asked
        again (for up to 10 s) until it is that many: a server process leaves
        ``pg_stat_activity`` a moment after its client has closed the connection."""
        for _ in range(100):
            with psycopg.connect(url) as conn:
                row = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                ).fetchone()
            assert row is not None
            count = int(row[0])
            if settled is None or count == settled:
                break
            time.sleep(0.1)
        return count

    def test_one_per_loop_closed_at_its_end(self, url: str, make_harness: Any) -> None:
        """``run_sync`` outside ``with harness:`` runs each call on a loop of its own: each
        opens a connection and closes it at its end. Inside, the calls share one."""
        store = open_checkpointer(url)
        script = ScriptedProvider([reply("one"), reply("two"), reply("three"), reply("four")])
        harness = make_harness(params([]), script, checkpointer=store)
        assert self.backends(url) == 1  # the store's synchronous connection
        for _ in range(2):
            assert harness.run_sync("go").exit_reason == "model_complete"
            assert self.backends(url) == 1
        with harness:
            harness.run_sync("go")
            assert self.backends(url) == 2
            harness.run_sync("go")
            assert self.backends(url) == 2
        assert self.backends(url) == 1
        assert [r.status for r in store.runs()] == ["finished"] * 4
        store.close()
        assert self.backends(url, settled=0) == 0

    def test_open_ahead_and_close(self, url: str, make_harness: Any) -> None:
        """``aconnect()`` opens the loop's connection ahead of its first commit;
        ``store.close()`` on the loop whose connection is open (and then the loop's end)
        closes it: nothing is left for the garbage collector to warn about."""
        store = PostgresCheckpointer(url)
        harness = make_harness(params([]), ScriptedProvider([reply("done")]), checkpointer=store)

        async def main() -> tuple[int, int]:
            await store.aconnect()  # opened before the first commit (once: a run reuses it)
            connected = await asyncio.to_thread(self.backends, url)
            await harness.run("go")
            open_now = await asyncio.to_thread(self.backends, url)
            store.close()
            return connected, open_now

        assert asyncio.run(main()) == (2, 2)
        assert self.backends(url, settled=0) == 0

    def test_concurrent_first_commits_share_one(self, url: str, make_harness: Any) -> None:
        """Ten runs starting together on one loop open one connection between them."""
        store = open_checkpointer(url)
        script = ScriptedProvider([reply(f"r{i}") for i in range(10)])
        harness = make_harness(params([]), script, checkpointer=store)

        async def main() -> int:
            states = await asyncio.gather(*(harness.run("go") for _ in range(10)))
            assert {s.exit_reason for s in states} == {"model_complete"}
            return await asyncio.to_thread(self.backends, url)

        assert asyncio.run(main()) == 2
        assert len(store.runs()) == 10
        store.close()

    def test_a_cancelled_commit_leaves_the_connection_usable(
        self, url: str, make_harness: Any
    ) -> None:
        """A run cancelled while its commit waits on the server: psycopg cancels the
        statement, and the next run on the loop commits on the same connection."""
        store = open_checkpointer(url)
        script = ScriptedProvider([reply("one"), reply("two")])
        harness = make_harness(params([]), script, checkpointer=store)
        first = harness.start("go")
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(SLOW_TRIGGER.replace("0.3", "5"))

        async def main() -> None:
            task = asyncio.create_task(first.run())
            await asyncio.sleep(0.5)  # in its first commit, on the server
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("DROP TRIGGER slow ON innerloop_checkpoints")
            second = await harness.run("go")
            assert second.exit_reason == "model_complete"
            assert await asyncio.to_thread(self.backends, url) == 2

        started = time.monotonic()
        asyncio.run(main())
        assert time.monotonic() - started < 4
        assert [i.state for i in store.checkpoints(first.run_id)] == ["idle"]
        store.close()
