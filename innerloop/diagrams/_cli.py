"""``innerloop diagram``: draw a machine, optionally with a recorded run on it.

    innerloop diagram [--format svg|png|dot|mermaid] [--spec module:attr]
                      [--trace run.jsonl] [-o FILE]
    innerloop diagram --write-all DIR

``--write-all`` writes the default machine (``DIR/innerloop.{svg,dot,mmd}``) and the worked
examples (``DIR/examples/``); ``make diagrams`` runs it for the repository's ``diagrams/``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from innerloop.diagrams._dot import GraphvizNotFound, render, to_dot
from innerloop.diagrams._files import write_all
from innerloop.diagrams._mermaid import to_mermaid
from innerloop.diagrams._model import Diagram, build_diagram, load_trace
from innerloop.fsm._compile import CompiledMachine
from innerloop.fsm._default import DEFAULT_SPEC
from innerloop.fsm._spec import MachineSpec

__all__ = ["add_parser", "load_spec", "run", "write_repository_diagrams"]

FORMATS = ("svg", "png", "dot", "mermaid")
SUFFIX_FORMATS = {".svg": "svg", ".png": "png", ".dot": "dot", ".gv": "dot", ".mmd": "mermaid"}


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``diagram`` command to an ``argparse`` subparsers object."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "diagram",
        help="draw the machine (svg, png, dot or mermaid), optionally with a run's trace",
        description=(__doc__ or "").replace("``", ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--format",
        choices=FORMATS,
        help="output format (default: from the -o suffix, else svg)",
    )
    p.add_argument(
        "--spec",
        metavar="MODULE:ATTR",
        help="a MachineSpec or CompiledMachine to draw (default: the default machine)",
    )
    p.add_argument("--trace", metavar="RUN.JSONL", help="a run's event log to lay over the machine")
    p.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout")
    p.add_argument(
        "--write-all",
        metavar="DIR",
        help="write the default machine and the examples as svg, dot and mermaid into DIR",
    )
    return p


@contextlib.contextmanager
def _cwd_on_path() -> Iterator[None]:
    """The current directory on ``sys.path`` for the block, as ``python -m`` would have it
    (the ``innerloop`` script's own directory is there instead)."""
    cwd = os.getcwd()
    if any(os.path.abspath(entry or os.curdir) == cwd for entry in sys.path):
        yield
        return
    sys.path.insert(0, cwd)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(cwd)


def load_spec(target: str) -> MachineSpec | CompiledMachine:
    """The MachineSpec or CompiledMachine named by ``module:attr`` (attr may be dotted); the
    module may also sit in the current directory."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"--spec expects MODULE:ATTR (e.g. mypkg.machines:SPEC), got {target!r}")
    with _cwd_on_path():
        obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    if not isinstance(obj, MachineSpec | CompiledMachine):
        raise ValueError(
            f"--spec {target}: expected a MachineSpec or CompiledMachine, got {type(obj).__name__}"
        )
    return obj


def _format(args: argparse.Namespace) -> str:
    if args.format:
        return str(args.format)
    if args.output:
        return SUFFIX_FORMATS.get(Path(args.output).suffix.lower(), "svg")
    return "svg"


def _output(diagram: Diagram, fmt: str) -> bytes:
    if fmt == "dot":
        return to_dot(diagram).encode("utf-8")
    if fmt == "mermaid":
        return to_mermaid(diagram).encode("utf-8")
    return render(diagram, "png" if fmt == "png" else "svg")


def write_repository_diagrams(directory: str | Path) -> list[Path]:
    """Write the default machine and every worked example's machine into ``directory``."""
    from innerloop.examples import example_specs

    directory = Path(directory)
    written = write_all(build_diagram(DEFAULT_SPEC), directory)
    for name, spec in example_specs().items():
        written += write_all(build_diagram(spec), directory / "examples", name)
    return written


def run(args: argparse.Namespace) -> int:
    """Run the ``diagram`` command; returns the exit status."""
    try:
        if args.write_all:
            for path in write_repository_diagrams(args.write_all):
                print(f"wrote {path}")
            return 0
        machine = load_spec(args.spec) if args.spec else DEFAULT_SPEC
        diagram = build_diagram(machine)
        if args.trace:
            diagram = diagram.with_trace(load_trace(args.trace))
        data = _output(diagram, _format(args))
    except (GraphvizNotFound, ValueError, ImportError, AttributeError, OSError) as exc:
        print(f"innerloop diagram: {exc}", file=sys.stderr)
        return 1
    if args.output:
        Path(args.output).write_bytes(data)
    else:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    return 0
