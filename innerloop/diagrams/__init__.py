"""Render a machine (DOT, SVG, PNG, Mermaid), with a live state or a run's trace on it.

Build a :class:`Diagram` with :func:`build_diagram` from a spec, a compiled machine or a
live run; lay a run's event log over it with :meth:`Diagram.with_trace` (or
:func:`load_trace` for a JSONL file); then render it with :func:`to_dot`,
:func:`to_mermaid` (both plain text, no binary needed) or :func:`render` (SVG/PNG, needs
Graphviz's ``dot``).
"""

from innerloop.diagrams._dot import GraphvizNotFound, render, to_dot
from innerloop.diagrams._files import write_all
from innerloop.diagrams._mermaid import to_mermaid
from innerloop.diagrams._model import (
    Diagram,
    DiagramChild,
    DiagramEdge,
    DiagramEdgeGroup,
    DiagramState,
    Trace,
    build_diagram,
    load_trace,
    trace_from_events,
)

__all__ = [
    "Diagram",
    "DiagramChild",
    "DiagramEdge",
    "DiagramEdgeGroup",
    "DiagramState",
    "GraphvizNotFound",
    "Trace",
    "build_diagram",
    "load_trace",
    "render",
    "to_dot",
    "to_mermaid",
    "trace_from_events",
    "write_all",
]
