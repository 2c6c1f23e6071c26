"""The chaos campaign: seeded runs with random faults over loopback HTTP, each checked
against the invariants (final state, valid history, counters, no leftover process, no
warning, no API key in any output). Reports runs/s and breaks, and the first failing
seeds with what broke. The campaign itself is ``tests/chaos_runner.py`` (its docstring
lists the faults and the invariants); ``tests/test_chaos.py`` runs a 300-run slice.

    python bench/chaos.py --runs 10000 --jobs 16 --seed 0
    python bench/chaos.py --runs 10000 --jobs 16 --load 2   # beside 2 busy processes

Replay one failing seed alone: ``python bench/chaos.py --runs 1 --jobs 1 --seed N``.
Exit status 1 when anything broke.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's innerloop and tests, not an installed copy

from tests.chaos_runner import Report, busy_processes, run_campaign  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000, help="runs to play (10000)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first run (0)")
    parser.add_argument("--jobs", type=int, default=16, help="concurrent runs (16)")
    parser.add_argument("--show", type=int, default=10, help="failing seeds to print (10)")
    parser.add_argument("--every", type=int, default=1000, help="progress every N runs")
    parser.add_argument(
        "--load",
        type=int,
        default=0,
        metavar="N",
        help="N busy processes beside the campaign, a core each (0)",
    )
    parser.add_argument(
        "--load-for",
        type=float,
        default=7200.0,
        metavar="S",
        help="the busy processes stop by themselves after S seconds at the latest (7200)",
    )
    args = parser.parse_args(argv)
    marks = [0]

    def progress(report: Report) -> None:
        if report.runs - marks[0] >= args.every:
            marks[0] = report.runs
            print(f"... {report.runs} runs, {len(report.broken_seeds)} breaks", flush=True)

    with busy_processes(args.load, args.load_for):
        report = run_campaign(args.runs, seed=args.seed, jobs=args.jobs, progress=progress)
    print(report.summary(first=args.show))
    return 1 if report.breaks else 0


if __name__ == "__main__":
    sys.exit(main())
