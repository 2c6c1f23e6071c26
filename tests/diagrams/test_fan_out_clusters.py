"""A fan-out over a list of different children is drawn with every child's machine: a
cluster per child inside the parent's state, labelled by the child's name, each with its
own states and its own runs' trace (DOT, Mermaid, SVG and PNG through the real ``dot``)."""

from __future__ import annotations

import asyncio
import re
import shutil
from typing import Any

import pytest

from innerloop import Harness, HarnessParams
from innerloop.diagrams import build_diagram, render, to_dot, to_mermaid
from innerloop.diagrams._model import TIMES
from innerloop.fsm import (
    DEFAULT_SPEC,
    MachineSpec,
    child_handler,
    fan_out_handler,
)
from innerloop.testing import ScriptedProvider, reply
from tests.ui.test_children import _kid, _machine

needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz 'dot' not installed")


def specialists() -> MachineSpec:
    """Machine ``research``: its state ``survey`` fans out to ``web`` (on machine
    ``web-machine``) and ``code`` (on ``code-machine``, whose state ``review`` runs a
    grandchild ``lint``)."""
    web = _kid("web", reply("Sales fell."), machine=DEFAULT_SPEC.renamed("web-machine"))
    lint = _kid("lint", reply("Clean."))
    code = _kid(
        "code",
        reply("totals.py."),
        machine=_machine("code-machine", "review", child_handler(lint)),
    )
    return _machine("research", "survey", fan_out_handler([web, code], limit=2))


def _nodes(dot: str, prefix: str) -> set[str]:
    """The names of the nodes declared in ``dot`` that start with ``prefix``."""
    return set(re.findall(rf"^\s*({re.escape(prefix)}\w+) \[", dot, re.M))


def _events() -> list[dict[str, Any]]:
    """The event dicts of a real run of :func:`specialists` (both children, the
    grandchild, the parent's own answer)."""
    spec = specialists()
    lead = ScriptedProvider([reply("Both answered.")], name="lead")
    harness = Harness(HarnessParams(model="lead:m"), {"lead": lead}, machine=spec)

    async def play() -> list[dict[str, Any]]:
        run = harness.start("How did sales go, and where is that computed?")
        return [e.to_dict() async for e in run.events()]

    return asyncio.run(play())


def test_the_state_holds_every_childs_machine_in_the_lists_order() -> None:
    state = build_diagram(specialists()).state("survey")
    assert [(c.name, c.diagram.name) for c in state.children] == [
        ("web", "web-machine"),
        ("code", "code-machine"),
    ]
    assert (state.child_name, state.child and state.child.name) == ("web", "web-machine")
    code = state.children[1].diagram
    assert [c.name for c in code.state("review").children] == ["lint"]


def test_dot_draws_a_cluster_per_child_labelled_by_its_name() -> None:
    spec = specialists()
    dot = to_dot(build_diagram(spec))
    assert "subgraph cluster_child_survey__web__ {" in dot
    assert "subgraph cluster_child_survey__code__ {" in dot
    assert 'label="survey: web runs web-machine"' in dot
    assert 'label="survey: code runs code-machine"' in dot
    web_states = {s.name for s in DEFAULT_SPEC.states}
    code_states = web_states | {"review"}
    assert _nodes(dot, "survey__web__") == {f"survey__web__{s}" for s in web_states}
    # the code child's own machine, and its grandchild's cluster inside its cluster
    assert {n for n in _nodes(dot, "survey__code__") if "__review__" not in n} == {
        f"survey__code__{s}" for s in code_states
    }
    assert "subgraph cluster_child_survey__code__review__ {" in dot
    assert _nodes(dot, "survey__code__review__") == {
        f"survey__code__review__{s}" for s in web_states
    }
    assert 'survey -> survey__web__idle [label="runs web"' in dot
    assert 'survey -> survey__code__idle [label="runs code"' in dot


def test_one_child_keeps_its_single_cluster() -> None:
    """A state running one child is drawn as before: ``state__inner``, ``runs``."""
    web = _kid("web", machine=DEFAULT_SPEC.renamed("web-machine"))
    dot = to_dot(
        build_diagram(_machine("solo", "survey", fan_out_handler(web, lambda state: ["a", "b"])))
    )
    assert "subgraph cluster_child_survey__ {" in dot
    assert 'label="survey: runs web-machine"' in dot
    assert "survey -> survey__idle [label=runs arrowhead=none style=dotted]" in dot
    assert "survey__web__" not in dot


def test_a_runs_trace_lands_on_each_childs_own_cluster() -> None:
    events = _events()
    diagram = build_diagram(specialists(), trace=events)
    web, code = (c.diagram for c in diagram.state("survey").children)
    assert web.end_state == code.end_state == "model_complete"
    assert ("idle", "review", None) in code.counts
    assert ("idle", "review", None) not in web.counts
    lint = code.state("review").children[0].diagram
    assert lint.end_state == "model_complete"
    dot = to_dot(diagram)
    assert f'survey__code__idle -> survey__code__review [label="{TIMES}1"' in dot
    assert f'survey__web__idle -> survey__web__assemble [label="{TIMES}1"' in dot
    grandchild = "survey__code__review__check -> survey__code__review__model_complete"
    assert f'{grandchild} [label="5. model_finished {TIMES}1"' in dot


def test_mermaid_holds_a_composite_state_per_child() -> None:
    text = to_mermaid(build_diagram(specialists()))
    assert 'state "web: web-machine" as survey__web {' in text
    assert 'state "code: code-machine" as survey__code {' in text
    assert "survey__code__idle --> survey__code__review" in text
    assert "survey__web__idle --> survey__web__review" not in text
    assert "survey__code__review__idle --> survey__code__review__assemble" in text


@needs_dot
def test_svg_and_png_through_dot_hold_every_childs_cluster() -> None:
    diagram = build_diagram(specialists(), trace=_events())
    svg = render(diagram, "svg").decode()
    for cluster in ("survey__web__", "survey__code__", "survey__code__review__"):
        assert f"<title>cluster_child_{cluster}</title>" in svg
    assert "survey: web runs web&#45;machine" in svg
    assert "survey: code runs code&#45;machine" in svg
    assert "<title>survey__code__review</title>" in svg
    assert render(diagram, "png").startswith(b"\x89PNG\r\n\x1a\n")


def test_children_not_open_are_one_node_each_saying_where_they_are() -> None:
    """``open`` names the clusters drawn open; every other child is one node (its id the
    cluster's) naming the child, its machine and its exit, joined by its ``runs`` line."""
    diagram = build_diagram(specialists(), trace=_events())
    dot = to_dot(diagram, open=set())
    assert "cluster_child_" not in dot
    assert not _nodes(dot, "survey__web__")
    assert not _nodes(dot, "survey__code__")
    web = re.search(r"^\s*survey__web__ \[(.*?)\]$", dot, re.M | re.S)
    assert web is not None
    assert 'label="▸ web: web-machine\nexit model_complete, 6 transitions"' in web.group(1)
    assert "class=collapsed" in web.group(1)
    assert 'survey -> survey__code__ [label="runs code"' in dot
    opened = to_dot(diagram, open={"survey__code__"})
    assert "subgraph cluster_child_survey__code__ {" in opened
    assert "cluster_child_survey__code__review__" not in opened  # the grandchild stays shut
    assert re.search(r"^\s*survey__code__review__ \[", opened, re.M)
    assert re.search(r"^\s*survey__web__ \[", opened, re.M)
    static = to_dot(build_diagram(specialists()), open=())
    assert 'label="▸ code: code-machine"' in static  # no run: no place to say


def test_a_child_not_run_is_greyed_when_collapsed() -> None:
    events = [{"type": "transition", "source": "idle", "target": "survey", "guard": None}]
    dot = to_dot(build_diagram(specialists(), trace=events), open=())
    assert 'label="▸ web: web-machine\nnot run"' in dot


def test_taken_keeps_only_what_the_run_used_children_too() -> None:
    """The run's states and edges, each child's likewise; a child that did not run is
    left out; without a trace the diagram is the same."""
    diagram = build_diagram(specialists(), trace=_events()).taken()
    assert {s.name for s in diagram.states} == {
        "idle", "survey", "assemble", "normalize", "call", "stream", "check", "model_complete"
    }  # fmt: skip
    assert all(diagram.counts.get(e.key) for e in diagram.edges)
    web, code = (c.diagram for c in diagram.state("survey").children)
    assert "review" not in {s.name for s in web.states}
    assert "backoff" not in {s.name for s in code.states}
    assert {s.name for s in code.state("review").children[0].diagram.states} >= {"check"}
    dot = to_dot(diagram)
    assert not _nodes(dot, "backoff")
    first = [{"type": "transition", "source": "idle", "target": "survey", "guard": None}]
    assert build_diagram(specialists(), trace=first).taken().state("survey").children == ()
    whole = build_diagram(specialists())
    assert whole.taken() is whole
