"""``innerloop replay``: run a recorded run again and say whether it went the same way.

    innerloop replay LOG [--run N|last|RUN_ID] [--spec MODULE:ATTR]... [--real-tools]
                     [--harness MODULE:ATTR]
    innerloop replay --db URL RUN_ID|last --harness MODULE:ATTR [--spec MODULE:ATTR]...

A log is data: nothing it names is imported or evaluated. Its run is rebuilt from what it
recorded (its params as data: the output type as its JSON Schema, tools that return their
recorded results) on the default machine or one named by ``--spec``; a machine recorded
by import path is named in the error, never imported. A stored run (``--db``: a checkpoint
store keeps no params) needs ``--harness``, the Harness (or a function of no argument
returning one) it ran on: its params and machine. Given with a log, ``--harness`` replaces
the recorded params; ``--real-tools`` runs its tools (the log's are only records).
Prints ``OK`` with the run replayed and exits 0; at the first difference prints it (the
state, the request that differs, the response recorded for it) and exits 1; exits 2 when
the run cannot be replayed (an older log, no such run, its machine or params not at hand,
a log that cannot be read), in one line.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from innerloop.fsm._locate import add_spec_option

__all__ = ["add_parser", "run"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``replay`` command to an ``argparse`` subparsers object."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "replay",
        help="replay a recorded run offline and report the first divergence",
        description=(__doc__ or "").replace("``", ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "log",
        metavar="LOG|RUN_ID",
        help="a JSONL event log (innerloop run --log, demo); with --db, the stored run's id",
    )
    p.add_argument(
        "--run", default="last", metavar="N|last|RUN_ID", help="which run of the log (1 = first)"
    )
    p.add_argument(
        "--db",
        metavar="URL",
        help="replay the stored run RUN_ID of this checkpoint store (sqlite:///runs.db, ...)",
    )
    p.add_argument(
        "--harness",
        metavar="MODULE:ATTR",
        help="the Harness the run ran on (or a function returning one): its params and machine",
    )
    add_spec_option(
        p,
        "a machine the run may have recorded (repeatable; a recorded import path is never "
        "imported: name it here)",
    )
    p.add_argument(
        "--real-tools",
        action="store_true",
        help="run the tools of --harness instead of returning their recorded results",
    )
    return p


def run(args: argparse.Namespace) -> int:
    """Run the ``replay`` command; returns the exit status."""
    from innerloop.testing import ReplayError, replay

    source, which = (args.db, args.log) if args.db else (args.log, args.run)
    specs = list(args.spec)
    params = None
    try:
        if args.harness is not None:
            from innerloop.evals._cli import _load_harness

            harness = _load_harness(args.harness, ReplayError)
            params, specs = harness.params, [*specs, harness.machine.spec]
        elif args.real_tools:
            raise ReplayError(
                "--real-tools runs the tools you give, and a log keeps no code (its recorded "
                "function paths are never imported); pass --harness MODULE:ATTR naming the "
                "Harness whose tools to run"
            )
        elif args.db:
            raise ReplayError(
                f"cannot replay run {which} of {args.db}: a checkpoint store keeps no params; "
                "pass --harness MODULE:ATTR naming the Harness the run ran on (or a function "
                "of no argument returning one), or replay the run's event log instead"
            )
        result = replay(source, which, specs=specs, params=params, real_tools=args.real_tools)
    except ReplayError as exc:
        print(f"innerloop replay: {exc}", file=sys.stderr)
        return 2
    if result.divergence is None:
        print(
            f"OK {result.where}: {result.transitions} transitions, {result.calls} model calls, "
            f"exit_reason={result.state.exit_reason}"
        )
        return 0
    print(f"DIVERGED {result.where}: {result.divergence}")
    return 1
