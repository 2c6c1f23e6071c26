"""The 50-case eval over the loopback servers (the real anthropic and openai SDK clients
over HTTP; ``tests/eval_loopback.py`` lists its ten kinds of case), printed as
``innerloop eval`` prints a report, with its wall time.

    python bench/evals.py                       # 50 cases, 10 at a time
    python bench/evals.py --cases 500 --concurrency 50 --json report.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's innerloop and tests, not an installed copy

from rich.console import Console  # noqa: E402

from tests.eval_loopback import loopback_eval  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--cases", type=int, default=50, help="cases (50)")
    parser.add_argument("--concurrency", type=int, default=10, help="runs at a time (10)")
    parser.add_argument("--json", metavar="OUT", help="also write the report as JSON")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    report = loopback_eval(args.cases, args.concurrency)
    took = time.perf_counter() - started
    Console().print(report)
    print(
        f"{len(report.results)} cases in {report.seconds:.2f} s of eval "
        f"({took:.2f} s in all, importing and building the SDK clients included), "
        f"{len(report.results) / report.seconds:.0f} cases/s"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(report.to_dict(), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
