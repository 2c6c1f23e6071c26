"""``innerloop replay``: run recorded runs again and say whether they went the same way.

    innerloop replay LOG [--run N|last|RUN_ID] [--spec MODULE:ATTR]... [--real-tools]
                     [--harness MODULE:ATTR]
    innerloop replay --db URL RUN_ID|last --harness MODULE:ATTR [--spec MODULE:ATTR]...

A log is data: nothing it names is imported or evaluated. Its runs are rebuilt from what
it recorded (its params as data: the output type as its JSON Schema, tools that return
their recorded results) on the default machine or one named by ``--spec``; a machine
recorded by import path is named in the error, never imported. A stored run (``--db``: a
checkpoint store keeps no params) needs ``--harness``, the Harness (or a function of no
argument returning one) it ran on: its params and machine. Given with a log,
``--harness`` replaces the recorded params; ``--real-tools`` runs its tools (the log's are
only records).

Every run of the log is replayed, unless ``--run`` picks one. One run: prints ``OK`` with
the run replayed and exits 0, or at the first difference prints it (the state, the request
that differs, the response recorded for it) and exits 1. Several runs: one line per run
(``OK run N of LOG: ...`` or ``DIVERGED run N of LOG: <where it differs>``), then one line
over them all; exits 0 when every run went the same way, 1 when one differs (``--run N``
shows its whole difference). Exits 2 when a run cannot be replayed (an older log, no such
run, its machine or params not at hand, a log that cannot be read), saying why in one line
on stderr.
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
        help="replay a log's recorded runs offline (every run, or --run N) and report each",
        description=(__doc__ or "").replace("``", ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "log",
        metavar="LOG|RUN_ID",
        help="a JSONL event log (innerloop run --log, demo); with --db, the stored run's id",
    )
    p.add_argument(
        "--run",
        metavar="N|last|RUN_ID",
        help="replay only this run of the log (1 = first); without it, every run",
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
    from innerloop.testing import ReplayError
    from innerloop.testing._recording import log_runs

    try:
        params, specs = _given(args)
        if args.db or args.run is not None:
            return _one(args, args.db or args.log, args.log if args.db else args.run, params, specs)
        count = log_runs(args.log)
        if count <= 1:
            return _one(args, args.log, "last", params, specs)
    except ReplayError as exc:
        print(f"innerloop replay: {exc}", file=sys.stderr)
        return 2
    return _every(args, count, params, specs)


def _given(args: argparse.Namespace) -> tuple[Any, list[Any]]:
    """The params (None: the recorded ones) and machines the command line gives."""
    from innerloop.testing import ReplayError

    specs = list(args.spec)
    if args.harness is not None:
        from innerloop.evals._cli import _load_harness

        harness = _load_harness(args.harness, ReplayError)
        return harness.params, [*specs, harness.machine.spec]
    if args.real_tools:
        raise ReplayError(
            "--real-tools runs the tools you give, and a log keeps no code (its recorded "
            "function paths are never imported); pass --harness MODULE:ATTR naming the "
            "Harness whose tools to run"
        )
    if args.db:
        raise ReplayError(
            f"cannot replay run {args.log} of {args.db}: a checkpoint store keeps no params; "
            "pass --harness MODULE:ATTR naming the Harness the run ran on (or a function "
            "of no argument returning one), or replay the run's event log instead"
        )
    return None, specs


def _one(args: argparse.Namespace, source: str, which: str, params: Any, specs: list[Any]) -> int:
    """One run replayed: ``OK ...``, or ``DIVERGED ...`` with the whole difference."""
    from innerloop.testing import replay

    result = replay(source, which, specs=specs, params=params, real_tools=args.real_tools)
    if result.divergence is None:
        print(_ok(result))
        return 0
    print(f"DIVERGED {result.where}: {result.divergence}")
    return 1


def _every(args: argparse.Namespace, count: int, params: Any, specs: list[Any]) -> int:
    """Every run of the log replayed, one line each, then one line over them all: 0 when
    every run went the same way, 1 when one differs, 2 when one could not be replayed."""
    from innerloop.testing import ReplayError, replay

    differ: list[int] = []
    failed: list[int] = []
    for n in range(1, count + 1):
        try:
            result = replay(args.log, n, specs=specs, params=params, real_tools=args.real_tools)
        except ReplayError as exc:
            print(f"innerloop replay: {exc}", file=sys.stderr)
            failed.append(n)
            continue
        if result.divergence is None:
            print(_ok(result))
        else:
            differ.append(n)
            first = str(result.divergence).splitlines()[0]
            print(f"DIVERGED {result.where}: {first}")
    same = count - len(differ) - len(failed)
    summary = f"{count} runs: {same} the same, {len(differ)} different"
    if failed:
        summary += f", {len(failed)} could not be replayed"
    if differ:
        summary += f"; the whole difference: --run {differ[0]}"
    print(summary)
    return 2 if failed else 1 if differ else 0


def _ok(result: Any) -> str:
    return (
        f"OK {result.where}: {result.transitions} transitions, {result.calls} model calls, "
        f"exit_reason={result.state.exit_reason}"
    )
