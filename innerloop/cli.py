"""Command line: ``innerloop demo``, ``innerloop diagram``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from innerloop.diagrams import _cli as diagram_cli

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="innerloop", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="run the offline demo (no network, no API key)")
    diagram_cli.add_parser(sub)
    args = parser.parse_args(argv)
    if args.command == "diagram":
        return diagram_cli.run(args)
    if args.command == "demo":
        from innerloop._demo import run_demo

        state = run_demo()
        return 0 if state.exit_reason in ("model_complete", "tasks_complete") else 1
    return 2


if __name__ == "__main__":
    sys.exit(main())
