"""A run that waits for an answer from the page: a research agent fans out to two scouts
(one at a time), the second scout asks before a paid call, so the whole run suspends on
that fan-out branch's approval. It ran with a checkpoint store and an event log; the
harness that answers it has the providers' answers for the rest of the run."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from innerloop import EventLog, Harness, HarnessParams
from innerloop.examples.research import scout
from innerloop.fsm import DEFAULT_SPEC, MachineSpec, StateSpec, fan_out_handler, with_child_state
from innerloop.testing import ScriptedProvider, reply, tool_call

RUN_ID = "r1"
LOG = "research.jsonl"
RUN = f"log:{LOG}:1"
ASKED = "survey:1"
"""The id of the question the run waits on (an answer names it)."""
TASK = "How did European heat-pump sales do in 2024? Write me a brief."
QUESTIONS = ("How did heat-pump sales change in 2024?", "Which country fell most?")
REPORT = {"title": "EHPA market report 2025"}


def research_spec(scouts: Sequence[Any]) -> MachineSpec:
    """The default machine with a ``survey`` fan-out of the scout over two questions, one
    at a time, the scouts answered by ``scouts`` (a script)."""
    kid = ScriptedProvider(list(scouts), name="kid")
    branch = scout("kid:scout-model", {"kid": kid})
    return with_child_state(
        DEFAULT_SPEC,
        StateSpec("survey", doc="the scouts look up one question each"),
        fan_out_handler(branch, lambda state: list(QUESTIONS), limit=1),
        source="idle",
        target="assemble",
        on_failure="failed",
    ).renamed("research")


def _harness(db: str, scouts: Sequence[Any], lead: Sequence[Any]) -> Harness[None]:
    params = HarnessParams(model="scripted:lead-model", system="You lead the research.")
    return Harness(
        params,
        [ScriptedProvider(list(lead))],
        machine=research_spec(scouts),
        checkpointer=db,
    )


def suspended_run(root: Path) -> tuple[str, MachineSpec]:
    """Run it until it waits (``root/research.jsonl`` and ``root/runs.db``); the store's
    URL and the machine."""
    db = f"sqlite:///{root / 'runs.db'}"
    scouts = [
        reply("Searching.", tool_call("web_search", {"query": "heat pumps 2024"}, id="c1")),
        reply("Sales fell 21% in 2024 (IEA 2024)."),
        reply("The EHPA report has it.", tool_call("buy_report", REPORT, id="call_buy")),
    ]
    harness = _harness(db, scouts, [])
    with EventLog(root / LOG, {"command": "test"}) as log:
        for event in harness.start(TASK, run_id=RUN_ID).iter_sync():
            log.write(event)
    assert harness.checkpointer is not None
    harness.checkpointer.close()
    return db, harness.machine.spec


def answering_harness(db: str) -> Harness[None]:
    """The harness the page's answer lands in: the rest of the run's answers."""
    scouts = [reply("Poland fell most: -40% (EHPA market report 2025).")]
    lead = [reply("Notes: sales fell 21% in 2024; Poland fell most (-40%).")]
    return _harness(db, scouts, lead)


def harness_from_env() -> Harness[None]:
    """``innerloop ui --harness tests.ui.answering:harness_from_env``: the answering
    harness on the store ``INNERLOOP_TEST_DB`` names."""
    return answering_harness(os.environ["INNERLOOP_TEST_DB"])


def harness_without_store() -> Harness[None]:
    """A harness that keeps its runs in no store (the page cannot answer through it)."""
    return Harness(HarnessParams(model="scripted:m"), [ScriptedProvider([])])
