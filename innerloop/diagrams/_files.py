"""Write a machine's diagrams to files, and tell which written files are stale."""

from __future__ import annotations

import re
from pathlib import Path

from innerloop.diagrams._dot import DOT_HASH_PREFIX, dot_hash, render, to_dot
from innerloop.diagrams._mermaid import to_mermaid
from innerloop.diagrams._model import Diagram

__all__ = ["stale_files", "write_all"]

SUFFIXES = (".dot", ".mmd", ".svg")
_STAMP = re.compile(re.escape(DOT_HASH_PREFIX) + r" ([0-9a-f]{64})")


def _paths(directory: Path, stem: str) -> dict[str, Path]:
    return {suffix: directory / f"{stem}{suffix}" for suffix in SUFFIXES}


def write_all(diagram: Diagram, directory: str | Path, stem: str | None = None) -> list[Path]:
    """Write ``STEM.dot``, ``STEM.mmd`` and ``STEM.svg`` (``stem`` defaults to the machine
    name) into ``directory``, creating it. The SVG needs Graphviz's ``dot`` binary."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = _paths(directory, stem or diagram.name)
    dot = to_dot(diagram)
    svg = render(diagram, "svg")
    paths[".dot"].write_text(dot, encoding="utf-8")
    paths[".mmd"].write_text(to_mermaid(diagram), encoding="utf-8")
    paths[".svg"].write_bytes(svg)
    return list(paths.values())


def stale_files(diagram: Diagram, directory: str | Path, stem: str | None = None) -> list[str]:
    """The files ``write_all`` would change, each with the reason; empty when all are
    fresh. DOT and Mermaid are compared exactly; an SVG is fresh when the DOT hash stamped
    in it matches (Graphviz output differs between versions, the DOT source does not)."""
    paths = _paths(Path(directory), stem or diagram.name)
    dot = to_dot(diagram)
    expected = {".dot": dot, ".mmd": to_mermaid(diagram)}
    stale = []
    for suffix, path in paths.items():
        if not path.exists():
            stale.append(f"{path}: missing")
            continue
        text = path.read_text(encoding="utf-8")
        if suffix in expected and text != expected[suffix]:
            stale.append(f"{path}: differs from the machine")
        if suffix == ".svg":
            found = _STAMP.search(text)
            if found is None or found.group(1) != dot_hash(dot):
                stale.append(f"{path}: rendered from another DOT source")
    return stale
