"""Graphviz output: DOT text (no binary needed), SVG and PNG (need the ``dot`` binary).

Layout: the happy path runs top to bottom; the recovery states sit in their own cluster
beside it; the final states share the bottom rank. Recovery edges are dashed and orange,
exit edges green, happy edges black. With a trace, the states and edges the run never used
are greyed, each taken edge shows its count, and the path to the exit is drawn thick blue.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection
from typing import Literal

import graphviz

from innerloop._errors import InnerloopError
from innerloop.diagrams._model import TIMES, Diagram, DiagramEdgeGroup, DiagramState

__all__ = ["GraphvizNotFound", "render", "to_dot"]

ImageFormat = Literal["svg", "png"]
START = "__start__"
FONT = "Helvetica"

# colours
INK = "#222222"
GREY = "#c8c8c8"
GREY_TEXT = "#a0a0a0"
KIND_COLOUR = {"happy": INK, "recovery": "#d35400", "exit": "#2e7d32"}
FILL = {"phase": "#eaf2fb", "recovery": "#fdebd0", "final": "#e3f1e3"}
BORDER = {"phase": "#2c5d8a", "recovery": "#d35400", "final": "#2e7d32"}
WEIGHT = {"happy": "8", "recovery": "1", "exit": "2"}
PATH = "#1565c0"
CURRENT_FILL = "#ffe066"
END_FILL = "#9fd49f"

DOT_HASH_PREFIX = "innerloop-dot-sha256:"


class GraphvizNotFound(InnerloopError, RuntimeError):
    """The Graphviz ``dot`` binary, needed for SVG and PNG, is not installed."""

    def __init__(self, format: str) -> None:
        self.format = format
        super().__init__(
            f"rendering {format.upper()} needs the Graphviz 'dot' binary, which was not found "
            "on PATH; install it with 'apt-get install graphviz' (Debian/Ubuntu package "
            "graphviz) or 'brew install graphviz' (macOS Homebrew), or ask for DOT or "
            "Mermaid text, which need no binary"
        )


def _state_label(s: DiagramState) -> str:
    if s.final:
        return f"{s.name}\nexit: {s.exit_reason}"
    return s.name


def _state_attrs(d: Diagram, s: DiagramState) -> dict[str, str]:
    out = {
        "label": _state_label(s),
        "fillcolor": FILL[s.kind],
        "color": BORDER[s.kind],
        "tooltip": s.doc or s.name,
    }
    if s.final:
        out["peripheries"] = "2"
    if d.trace is not None and s.name not in d.visited:
        out.update(fillcolor="#f7f7f7", color=GREY, fontcolor=GREY_TEXT)
    if s.name == d.end_state:
        out.update(fillcolor=END_FILL, penwidth="2.5")
    if s.name == d.current:
        out.update(fillcolor=CURRENT_FILL, penwidth="3", color=INK)
        out["label"] += "\n(current)"
    return out


def _edge_attrs(d: Diagram, g: DiagramEdgeGroup) -> dict[str, str]:
    colour = KIND_COLOUR[g.kind]
    out = {"color": colour, "fontcolor": colour, "weight": WEIGHT[g.kind], "tooltip": g.tooltip}
    if g.kind == "recovery":
        out["style"] = "dashed"
    labels = list(g.labels)
    if d.trace is not None:
        counts = [d.counts.get(e.key, 0) for e in g.edges]
        labels = [
            f"{label} {TIMES}{n}" if n else label
            for label, n in zip([e.label for e in g.edges], counts, strict=True)
        ]
        labels = [label for label in labels if label]
        total = sum(counts)
        if not total:
            out.update(color=GREY, fontcolor=GREY_TEXT)
        else:
            if len(g.edges) == 1 and not g.edges[0].label:
                labels = [f"{TIMES}{total}"]
            out["penwidth"] = str(min(1.5 + total / 2, 4.0))
            if any(e.key in d.exit_path for e in g.edges):
                out.update(color=PATH, fontcolor=PATH, penwidth="4", style="solid")
    if labels:
        out["label"] = "\n".join(labels)
    return out


def to_dot(diagram: Diagram, *, open: Collection[str] | None = None) -> str:
    """The diagram as DOT text (built with the ``graphviz`` package; no binary needed).

    ``open`` names the child clusters drawn open (by their id, ``survey__``, a fan-out's
    ``survey__web__``, a grandchild's ``survey__code__review__``; the prefix of their
    states' names); each other child is drawn collapsed, as one node of that id labelled
    with the child's name, machine and where its runs are. ``None`` (the default) opens
    them all."""
    g = graphviz.Digraph(diagram.name, comment=f"innerloop machine {diagram.name!r}")
    g.attr(
        rankdir="TB",
        nodesep="0.6",
        ranksep="0.7",
        fontname=FONT,
        newrank="true",
        label=_title(diagram),
        labelloc="t",
        fontsize="16",
    )
    g.attr("node", shape="box", style="rounded,filled", fontname=FONT, fontsize="12")
    g.attr("edge", fontname=FONT, fontsize="9", arrowsize="0.7")
    g.node(START, "", shape="circle", style="filled", fillcolor=INK, width="0.18")
    for s in diagram.states:
        if s.kind == "phase":
            g.node(s.name, group="main", **_state_attrs(diagram, s))
    with g.subgraph(name="cluster_recovery") as c:
        c.attr(label="recovery", style="dashed,rounded", color=BORDER["recovery"])
        c.attr(fontcolor=BORDER["recovery"], fontsize="11")
        for s in diagram.states:
            if s.kind == "recovery":
                c.node(s.name, **_state_attrs(diagram, s))
    with g.subgraph(name="finals") as c:
        c.attr(rank="sink")
        for s in diagram.states:
            if s.final:
                c.node(s.name, **_state_attrs(diagram, s))
    for recovery, phase in _beside(diagram):
        with g.subgraph() as c:
            c.attr(rank="same")
            c.node(phase)
            c.node(recovery)
    g.edge(START, diagram.initial, color=INK)
    for group in diagram.edge_groups():
        g.edge(group.source, group.target, **_edge_attrs(diagram, group))
    _child_clusters(g, diagram, "", open)
    return str(g.source)


def _child_clusters(
    g: graphviz.Digraph, d: Diagram, prefix: str, open: Collection[str] | None
) -> None:
    """Each child state's machine as a cluster beside it (its states named
    ``state__inner``), joined to the state by a dotted ``runs`` line, with its own
    trace; a grandchild's inside its parent's cluster. A fan-out over several different
    children draws a cluster per child, labelled by its name (states named
    ``state__child__inner``). A child not ``open`` is one node instead (see
    :func:`to_dot`)."""
    for s in d.states:
        several = len(s.children) > 1
        for child in s.children:
            machine = child.diagram
            own = f"{prefix}{s.name}__" + (f"{child.name}__" if several else "")
            runs = f"runs {child.name}" if several else "runs"
            if open is not None and own not in open:
                g.node(own, **_collapsed_attrs(d, child.name, machine))
                g.edge(prefix + s.name, own, style="dotted", arrowhead="none", label=runs)
                continue
            label = f"{s.name}: runs {machine.name}"
            if several:
                label = f"{s.name}: {child.name} runs {machine.name}"
            with g.subgraph(name=f"cluster_child_{own}") as c:
                c.attr(label=label, style="rounded", color=INK)
                c.attr(fontcolor=INK, fontsize="11")
                for inner in machine.states:
                    c.node(own + inner.name, **_state_attrs(machine, inner))
                for group in machine.edge_groups():
                    c.edge(own + group.source, own + group.target, **_edge_attrs(machine, group))
                _child_clusters(c, machine, own, open)
            g.edge(
                prefix + s.name, own + machine.initial, style="dotted", arrowhead="none", label=runs
            )


def _collapsed_attrs(parent: Diagram, name: str | None, machine: Diagram) -> dict[str, str]:
    """A collapsed child: its name and machine, and where its runs are (ended, in a
    state, not run), filled as its state would be."""
    lines = [f"{name}: {machine.name}" if name else machine.name]
    out = {"shape": "folder", "class": "collapsed", "fillcolor": FILL["phase"]}
    out.update(color=BORDER["phase"], tooltip=f"{lines[0]} (click to open)")
    trace = machine.trace
    if machine.current is not None:
        lines.append(f"in {machine.current}")
        out.update(fillcolor=CURRENT_FILL, penwidth="2")
    elif trace is not None and trace.steps and machine.end_state is not None:
        end = machine.state(machine.end_state)
        if end.final:
            lines.append(f"exit {trace.exit_reason or end.exit_reason}")
            out.update(fillcolor=END_FILL, penwidth="2")
        else:
            lines.append(f"in {end.name}")
        lines[-1] += f", {len(trace.steps)} transitions"
    elif parent.trace is not None:
        lines.append("not run")
        out.update(fillcolor="#f7f7f7", color=GREY, fontcolor=GREY_TEXT)
    out["label"] = "\n".join(["\N{BLACK RIGHT-POINTING SMALL TRIANGLE} " + lines[0], *lines[1:]])
    return out


def _beside(d: Diagram) -> list[tuple[str, str]]:
    """Where each recovery state goes: one rank below the happy-path state it returns to
    (the target of its last edge), beside that state's happy successor. The edges there
    and back then run on different ranks and their labels do not collide."""
    kinds = {s.name: s.kind for s in d.states}
    pairs = []
    for s in d.states:
        if s.kind != "recovery":
            continue
        back = [e.target for e in d.edges if e.source == s.name][-1:]
        if not back or kinds[back[0]] != "phase":
            continue
        ahead = [
            e.target
            for e in d.edges
            if e.source == back[0] and e.kind == "happy" and kinds[e.target] == "phase"
        ]
        pairs.append((s.name, ahead[0] if ahead else back[0]))
    return pairs


def _title(d: Diagram) -> str:
    title = f"{d.name}"
    if d.trace is not None:
        n = len(d.trace.steps)
        end = d.trace.exit_reason or d.end_state
        title += f" (run: {n} transitions, exit {end})"
    elif d.current is not None:
        title += f" (live, in {d.current})"
    return title


def dot_hash(dot: str) -> str:
    """The SHA-256 of the DOT source an image was rendered from (kept inside SVGs)."""
    return hashlib.sha256(dot.encode("utf-8")).hexdigest()


def _stamp_svg(svg: bytes, dot: str) -> bytes:
    """Put the DOT hash in a comment after the XML declaration, so a stale SVG is found
    without comparing Graphviz's (version-dependent) output."""
    stamp = f"<!-- {DOT_HASH_PREFIX} {dot_hash(dot)} -->\n".encode()
    head, sep, rest = svg.partition(b"?>\n")
    return head + sep + stamp + rest if sep else stamp + svg


def render(
    diagram: Diagram, format: ImageFormat = "svg", *, open: Collection[str] | None = None
) -> bytes:
    """The diagram as SVG or PNG bytes (``open``: the child clusters drawn open, see
    :func:`to_dot`). Needs the Graphviz ``dot`` binary; raises :class:`GraphvizNotFound`
    naming the package to install when it is missing."""
    if format not in ("svg", "png"):
        raise ValueError(f"format must be 'svg' or 'png', got {format!r}")
    dot = to_dot(diagram, open=open)
    try:
        data: bytes = graphviz.Source(dot).pipe(format=format)
    except graphviz.ExecutableNotFound:
        raise GraphvizNotFound(format) from None
    return _stamp_svg(data, dot) if format == "svg" else data
