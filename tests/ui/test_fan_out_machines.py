"""The live view finds every child's machine of a fan-out over different children: each
child run's page names and draws its own machine (a log's run and a stored one), and the
run's diagram draws a cluster per child with its trace."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest

from innerloop import Harness, HarnessParams, tool
from innerloop._eventlog import EventLog
from innerloop.checkpoint import open_checkpointer
from innerloop.diagrams._model import TIMES
from innerloop.examples import with_approval
from innerloop.fsm import DEFAULT_SPEC, fan_out_handler
from innerloop.testing import ScriptedProvider, reply, tool_call
from innerloop.ui import Catalog
from tests.diagrams.test_fan_out_clusters import needs_dot, specialists

from .test_children import _kid, _machine

RUN = "log:research.jsonl:1"


@pytest.fixture(scope="module")
def research(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A runs folder holding one run of :func:`specialists` (``web``, ``code`` and
    ``code``'s grandchild ``lint``)."""
    root = tmp_path_factory.mktemp("research")
    lead = ScriptedProvider([reply("Both answered.")], name="lead")
    harness = Harness(HarnessParams(model="lead:m"), {"lead": lead}, machine=specialists())

    async def play() -> None:
        run = harness.start("How did sales go, and where is that computed?")
        with EventLog(root / "research.jsonl") as log:
            async for event in run.events():
                log.write(event)

    asyncio.run(play())
    return root


def test_each_child_of_a_logged_run_has_its_own_machine(research: Path) -> None:
    catalog = Catalog(research, machines=[specialists()])
    try:
        top = catalog.detail(RUN)
        machines = {c["path"]: c["machine"] for c in top["children"]}
        assert machines == {"web": "web-machine", "code": "code-machine", "code/lint": "innerloop"}
        for path, machine in machines.items():
            page = catalog.detail(RUN, child=path)
            assert (page["machine"], page["machine_error"]) == (machine, None)
    finally:
        catalog.close()


@needs_dot
def test_each_childs_page_draws_its_own_machine(research: Path) -> None:
    catalog = Catalog(research, machines=[specialists()])
    try:
        code = catalog.diagram(RUN, child="code").decode()
        assert "<title>review</title>" in code  # code-machine's own state
        assert "review: runs innerloop" in code  # its grandchild's cluster
        assert f"model_finished {TIMES}1" in code
        web = catalog.diagram(RUN, child="web").decode()
        assert "web&#45;machine" in web
        assert "<title>review</title>" not in web
        top = catalog.diagram(RUN).decode()
        for cluster in ("survey__web__", "survey__code__", "survey__code__review__"):
            assert f"<title>cluster_child_{cluster}</title>" in top
        assert "survey: code runs code&#45;machine" in top
    finally:
        catalog.close()


def test_each_child_of_a_stored_run_has_its_own_machine(tmp_path: Path) -> None:
    """A stored run waiting in its fan-out (``code`` asks an approval): the store keeps
    no child's machine, so each is found by its name among the fan-out's children."""

    @tool
    async def delete_file(path: str) -> str:
        """Delete a file."""
        return f"deleted {path}"

    web = _kid("web", reply("Sales fell."), machine=DEFAULT_SPEC.renamed("web-machine"))
    code = _kid(
        "code",
        reply(tool_call("delete_file", {"path": "build.log"}, id="k1")),
        reply("Deleted."),
        tools=[delete_file],
        machine=with_approval(),
    )
    spec = _machine("cleanup", "survey", fan_out_handler([web, code], limit=2))
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    lead = ScriptedProvider([reply("done")], name="lead")
    harness = Harness(HarnessParams(model="lead:m"), {"lead": lead}, machine=spec, checkpointer=db)
    state = harness.start("Clean up", run_id="r1").run_sync()
    assert state.exit_reason == "suspended"
    assert harness.checkpointer is not None
    harness.checkpointer.close()
    catalog = Catalog(store=open_checkpointer(db), machines=[spec])
    try:
        paths = [c["path"] for c in catalog.detail("db:r1")["children"]]
        assert sorted(paths) == ["code", "web"]
        found = {p: catalog.detail("db:r1", child=p) for p in paths}
        assert {p: (d["machine"], d["machine_error"]) for p, d in found.items()} == {
            "web": ("web-machine", None),
            "code": ("approval", None),
        }
    finally:
        catalog.close()


@needs_dot
def test_the_diagram_api_opens_only_the_clusters_named(research: Path, serve: Any) -> None:
    """``?open=`` (empty): every child one node; ``?open=survey__code__``: that cluster
    open, its grandchild and the other child still one node each; no ``open``: all open."""
    server = serve(Catalog(research, machines=[specialists()]))
    url = server.url + f"api/diagram/{RUN}"
    shut = httpx.get(url, params={"open": ""}, timeout=10).text
    assert "cluster_child_" not in shut
    assert shut.count('class="node collapsed"') == 2
    code = httpx.get(url, params=[("open", ""), ("open", "survey__code__")], timeout=10).text
    assert "<title>cluster_child_survey__code__</title>" in code
    assert "<title>cluster_child_survey__code__review__</title>" not in code
    assert code.count('class="node collapsed"') == 2  # web, and code's lint
    every = httpx.get(url, timeout=10).text
    assert "<title>cluster_child_survey__code__review__</title>" in every
    assert 'collapsed"' not in every


@needs_dot
def test_the_diagram_api_draws_the_path_taken_on_asking(research: Path, serve: Any) -> None:
    server = serve(Catalog(research, machines=[specialists()]))
    url = server.url + f"api/diagram/{RUN}"
    taken = httpx.get(url, params={"taken": "1"}, timeout=10).text
    assert "<title>survey__code__review__check</title>" in taken
    assert "<title>backoff</title>" not in taken
    assert "<title>survey__web__backoff</title>" not in taken
    assert "<title>backoff</title>" in httpx.get(url, timeout=10).text
