"""A child run's machine, the same from every source: a child on a custom machine (not
the default one) that ended is named by its machine in the live tree, the stored tree and
the logged tree, and in the live view's list of a stored run's children as in a log's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from innerloop import DEFAULT_SPEC, Child, EventLog, Harness, HarnessParams, RunTree, StateSpec
from innerloop.checkpoint import open_checkpointer
from innerloop.fsm import child_handler, with_child_state
from innerloop.testing import FakeClock, ScriptedProvider, reply
from innerloop.ui import Catalog


def _harness(url: str) -> Harness:
    """A run on machine ``outer`` whose ``ask`` state runs ``kid`` on machine ``helper``."""
    kid = Child(
        "kid",
        HarnessParams(model="k:m"),
        machine=DEFAULT_SPEC.renamed("helper"),
        providers={"k": ScriptedProvider([reply("kid says hi")], name="k")},
    )
    spec = with_child_state(
        DEFAULT_SPEC,
        StateSpec("ask"),
        child_handler(kid),
        source="idle",
        target="assemble",
        on_failure="failed",
    ).renamed("outer")
    return Harness(
        HarnessParams(model="scripted:m"),
        [ScriptedProvider([reply("done")])],
        machine=spec,
        checkpointer=url,
        clock=FakeClock(),
    )


def _machines(rows: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    return [(row["path"], row["machine"]) for row in rows]


def test_an_ended_childs_machine_from_store_log_and_live(db_url: str, tmp_path: Path) -> None:
    """The parent records the ended child with its machine's name; the stored tree equals
    the live and the logged one, and the live view lists the stored run's child with
    its machine, as it lists the logged run's."""
    harness = _harness(db_url)
    log = tmp_path / "run.jsonl"
    with EventLog(log) as events:
        run = harness.start("go", run_id="r")
        for event in run.iter_sync():
            events.write(event)
    assert harness.checkpointer is not None
    harness.checkpointer.close()
    assert run.state.notes["children"]["kid"]["machine"] == "helper"
    live = RunTree.of(run)
    assert [(r.path, r.machine, r.exit_reason) for r in live.walk()] == [
        ("", "outer", "model_complete"),
        ("kid", "helper", "model_complete"),
    ]
    assert RunTree.from_store(db_url, "r") == live == RunTree.from_log(log)
    store = open_checkpointer(db_url)
    try:
        stored = Catalog(store=store).detail("db:r")["children"]
    finally:
        store.close()
    logged = Catalog(files=(log,)).detail("log:run.jsonl:1")["children"]
    assert _machines(stored) == _machines(logged) == [("kid", "helper")]
