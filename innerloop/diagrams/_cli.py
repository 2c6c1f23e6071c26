"""``innerloop diagram``: draw a machine, optionally with a recorded run on it.

    innerloop diagram [--format svg|png|dot|mermaid] [--spec module:attr]...
                      [--trace run.jsonl [--run N|last|RUN_ID]] [-o FILE]
    innerloop diagram --write-all DIR

With --trace, the run is drawn on the machine it recorded (its run_started line): one of
the --spec given (matched by name and fingerprint), else the default machine when that is
the one; when none fits, one line says so and what to pass. A log is data: the import
path it recorded is named in that line, never imported. A log holding several runs needs
--run.

``--write-all`` writes the default machine (``DIR/innerloop.{svg,dot,mmd}``) and the worked
examples (``DIR/examples/``); ``make diagrams`` runs it for the repository's ``diagrams/``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from innerloop.diagrams._dot import GraphvizNotFound, render, to_dot
from innerloop.diagrams._files import write_all
from innerloop.diagrams._mermaid import to_mermaid
from innerloop.diagrams._model import Diagram, build_diagram, log_runs, pick_run
from innerloop.fsm._default import DEFAULT_SPEC
from innerloop.fsm._locate import MachineRecord, add_spec_option, find_machine, load_spec
from innerloop.fsm._spec import MachineSpec

__all__ = ["add_parser", "run", "write_repository_diagrams"]

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
    add_spec_option(
        p,
        "a MachineSpec or CompiledMachine to draw (default: the default machine); "
        "with --trace, repeatable: the machines a run may have recorded",
    )
    p.add_argument("--trace", metavar="RUN.JSONL", help="a run's event log to lay over the machine")
    p.add_argument(
        "--run", metavar="N|last|RUN_ID", help="with --trace: which run of the log (1 = first)"
    )
    p.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout")
    p.add_argument(
        "--write-all",
        metavar="DIR",
        help="write the default machine and the examples as svg, dot and mermaid into DIR",
    )
    return p


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


def _diagram(args: argparse.Namespace) -> Diagram:
    try:
        specs = [load_spec(target) for target in args.spec]
    except ValueError as exc:
        raise ValueError(f"--spec: {exc}") from None
    if args.trace:
        events, label = pick_run(log_runs(args.trace), args.run, args.trace)
        recorded = find_machine(MachineRecord.from_events(events), specs, what=label)
        return build_diagram(recorded, trace=events)
    if args.run:
        raise ValueError("--run picks a run of the --trace log; give --trace too")
    if len(specs) > 1:
        raise ValueError("without --trace, give one --spec: the machine to draw")
    machine: MachineSpec = specs[0] if specs else DEFAULT_SPEC
    return build_diagram(machine)


def run(args: argparse.Namespace) -> int:
    """Run the ``diagram`` command; returns the exit status."""
    try:
        if args.write_all:
            for path in write_repository_diagrams(args.write_all):
                print(f"wrote {path}")
            return 0
        diagram = _diagram(args)
        data = _output(diagram, _format(args))
    except (GraphvizNotFound, ValueError, OSError) as exc:
        print(f"innerloop diagram: {exc}", file=sys.stderr)
        return 1
    if args.output:
        Path(args.output).write_bytes(data)
    else:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    return 0
