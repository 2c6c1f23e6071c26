"""Mermaid ``stateDiagram-v2`` text, for Markdown on code hosts.

Mermaid's state diagrams cannot style single transitions, so the kinds are told apart in
the text: recovery edges carry ``↺`` before their label and exit edges ``⏹``, and they are
listed in their own commented sections. States are styled with ``classDef``: recovery
states orange, final states green (with their exit reason as the state's description).
With a trace, taken edges show their count, the exit path is marked ``★``, states the run
never visited are classed ``unvisited`` and the end state ``ended``; a live state is
classed ``current``.
"""

from __future__ import annotations

import re

from innerloop.diagrams._model import TIMES, Diagram, DiagramEdgeGroup

__all__ = ["to_mermaid"]

MARK = {"happy": "", "recovery": "↺ ", "exit": "⏹ "}
SECTION = {
    "happy": "happy path",
    "recovery": "recovery transitions (↺)",
    "exit": "exits to final states (⏹)",
}
CLASSES = (
    "classDef phase fill:#eaf2fb,stroke:#2c5d8a",
    "classDef recovery fill:#fdebd0,stroke:#d35400,stroke-dasharray:4 3",
    "classDef final fill:#e3f1e3,stroke:#2e7d32,stroke-width:2px",
    "classDef unvisited fill:#f7f7f7,stroke:#c8c8c8,color:#a0a0a0",
    "classDef ended fill:#9fd49f,stroke:#1565c0,stroke-width:3px",
    "classDef current fill:#ffe066,stroke:#222222,stroke-width:3px",
)


def _label(d: Diagram, g: DiagramEdgeGroup) -> str:
    parts = []
    for e in g.edges:
        text = e.label
        if d.trace is not None:
            n = d.counts.get(e.key, 0)
            if n:
                text = f"{text} {TIMES}{n}".strip()
        if text:
            parts.append(text)
    label = MARK[g.kind] + ", ".join(parts)
    if d.trace is not None and any(e.key in d.exit_path for e in g.edges):
        label = "★ " + label
    return label.strip()


def _classes(d: Diagram) -> dict[str, list[str]]:
    """State names per class, in declaration order."""
    out: dict[str, list[str]] = {}
    for s in d.states:
        cls: str = s.kind
        if d.trace is not None:
            if s.name == d.end_state:
                cls = "ended"
            elif s.name not in d.visited:
                cls = "unvisited"
        if s.name == d.current:
            cls = "current"
        out.setdefault(cls, []).append(s.name)
    return out


def to_mermaid(diagram: Diagram) -> str:
    """The diagram as Mermaid ``stateDiagram-v2`` text (ends with a newline)."""
    d = diagram
    lines = ["stateDiagram-v2", f"    %% machine: {d.name}", "    direction TB"]
    if d.trace is not None:
        lines.append(f"    %% run: {len(d.trace.steps)} transitions, ended in {d.end_state}")
    lines.append(f"    [*] --> {d.initial}")
    lines.extend(f"    {s.name} : exit_reason = {s.exit_reason}" for s in d.states if s.final)
    groups = d.edge_groups()
    for kind in ("happy", "recovery", "exit"):
        chosen = [g for g in groups if g.kind == kind]
        if not chosen:
            continue
        lines.append(f"    %% {SECTION[kind]}")
        for g in chosen:
            label = _label(d, g)
            lines.append(f"    {g.source} --> {g.target}" + (f" : {label}" if label else ""))
    lines.extend(f"    {s.name} --> [*]" for s in d.states if s.final)
    lines.extend(_children(d, "", "    "))
    lines.extend(f"    {c}" for c in CLASSES)
    for cls, names in _classes(d).items():
        lines.append(f"    class {','.join(names)} {cls}")
    lines.extend(_child_classes(d, ""))
    return "\n".join(lines) + "\n"


NOT_ID = re.compile(r"\W")
"""What a Mermaid state id cannot hold (a child's name's other characters become ``_``)."""


def _own(prefix: str, state: str, name: str | None, several: bool) -> str:
    """The prefix of a child machine's state ids: ``state__`` (``state__child__`` for
    one of several different children, its name's other characters made ``_``)."""
    if not several:
        return f"{prefix}{state}__"
    return f"{prefix}{state}__{NOT_ID.sub('_', name or '')}__"


def _children(d: Diagram, prefix: str, indent: str) -> list[str]:
    """Each child state as a composite state holding its child machine, whose states
    are named ``state__inner`` (a grandchild's ``state__inner__innermost``); a fan-out
    over several different children holds one composite state per child
    (``state__child``), its states named ``state__child__inner``."""
    lines: list[str] = []
    for s in d.states:
        if not s.children:
            continue
        several = len(s.children) > 1
        inner = indent + "    "
        lines.append(f"{indent}state {prefix}{s.name} {{")
        for child in s.children:
            machine = child.diagram
            own = _own(prefix, s.name, child.name, several)
            body = inner
            if several:
                lines.append(f'{inner}state "{child.name}: {machine.name}" as {own[:-2]} {{')
                body = inner + "    "
            lines.append(f"{body}%% child machine: {machine.name}")
            lines.extend(f'{body}state "{c.name}" as {own}{c.name}' for c in machine.states)
            lines.append(f"{body}[*] --> {own}{machine.initial}")
            for g in machine.edge_groups():
                label = _label(machine, g)
                edge = f"{body}{own}{g.source} --> {own}{g.target}"
                lines.append(edge + (f" : {label}" if label else ""))
            lines.extend(f"{body}{own}{c.name} --> [*]" for c in machine.states if c.final)
            lines.extend(_children(machine, own, body))
            if several:
                lines.append(f"{inner}}}")
        lines.append(f"{indent}}}")
    return lines


def _child_classes(d: Diagram, prefix: str) -> list[str]:
    lines: list[str] = []
    for s in d.states:
        several = len(s.children) > 1
        for child in s.children:
            own = _own(prefix, s.name, child.name, several)
            for cls, names in _classes(child.diagram).items():
                lines.append(f"    class {','.join(own + n for n in names)} {cls}")
            lines.extend(_child_classes(child.diagram, own))
    return lines
