"""Run and conversation ids every store can keep: an empty id or one holding NUL is
refused with the store's own error (CheckpointError), the same on the in-memory, SQLite and
PostgreSQL stores, before anything is written."""

from __future__ import annotations

import pytest

from innerloop import Harness, HarnessParams
from innerloop.checkpoint import Checkpointer, CheckpointError
from innerloop.testing import ScriptedProvider, reply

BAD = [
    ("", "a run id is a non-empty string, got ''"),
    (
        "a\x00b",
        "a run id cannot hold a NUL character (\\x00), which PostgreSQL cannot store; "
        "got 'a\\x00b'",
    ),
]


def harness(store: Checkpointer) -> Harness[str]:
    model = ScriptedProvider([reply("hi")] * 3)
    return Harness(HarnessParams(model="scripted:m"), [model], checkpointer=store)


@pytest.mark.parametrize(("run_id", "message"), BAD)
def test_a_bad_run_id_is_refused_by_every_store(
    store: Checkpointer, run_id: str, message: str
) -> None:
    """create_run, rows, checkpoints and machine refuse it with the same CheckpointError
    (PostgreSQL raised a raw DataError for NUL; SQLite stored it)."""
    for call in (
        lambda: store.create_run(run_id, "innerloop"),
        lambda: store.rows(run_id),
        lambda: store.checkpoints(run_id),
        lambda: store.machine(run_id),
    ):
        with pytest.raises(CheckpointError) as caught:
            call()
        assert str(caught.value) == message
    assert store.runs() == []


@pytest.mark.parametrize(("run_id", "message"), BAD)
def test_a_bad_run_id_for_a_run_or_a_fork_is_refused(
    store: Checkpointer, run_id: str, message: str
) -> None:
    """Harness.start(run_id=...) and fork(new_run_id=...) refuse it: an empty id is no
    longer taken for 'make me a random one'."""
    h = harness(store)
    with pytest.raises(CheckpointError) as caught:
        h.start("hi", run_id=run_id)
    assert str(caught.value) == message
    assert store.runs() == []
    h.run_sync("hi", run_id="r1")
    with pytest.raises(CheckpointError) as forked:
        h.fork("r1", at=1, new_run_id=run_id)
    assert str(forked.value) == message
    assert [r.run_id for r in store.runs()] == ["r1"]


@pytest.mark.parametrize(
    ("conversation_id", "message"),
    [
        ("", "a conversation id is a non-empty string, got ''; pass None for a new one"),
        (
            "c\x00",
            "a conversation id cannot hold a NUL character (\\x00), which PostgreSQL cannot "
            "store; got 'c\\x00'; pass None for a new one",
        ),
    ],
)
def test_a_session_refuses_an_empty_or_nul_id(
    store: Checkpointer, conversation_id: str, message: str
) -> None:
    """harness.session('') was a new random conversation each time: now refused, as an id
    holding NUL is, on every store; None still makes a new one."""
    h = harness(store)
    with pytest.raises(CheckpointError) as caught:
        h.session(conversation_id)
    assert str(caught.value) == message
    fresh = h.session(None)
    assert len(fresh.conversation_id) == 32
    assert store.runs() == []


def test_without_a_store_a_session_refuses_an_empty_id_too() -> None:
    h = Harness(HarnessParams(model="scripted:m"), [ScriptedProvider([reply("hi")])])
    with pytest.raises(CheckpointError, match="a conversation id is a non-empty string"):
        h.session("")
