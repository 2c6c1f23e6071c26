"""``innerloop eval`` and ``innerloop runs rerun``.

    innerloop eval DATASET --harness MODULE:ATTR [--predicates MODULE:ATTR]
                   [--concurrency N] [--json OUT] [--judge-model PROVIDER:MODEL]
                   [--check-seconds S] [--no-progress]
    innerloop runs rerun RUN_ID --db URL --harness MODULE:ATTR [--at N] [--message TEXT]
                   [--json OUT]

``--harness`` names a ``Harness`` (or a function of no argument returning one), as
``--spec`` names a machine. A dataset file is data: a ``Predicate: NAME`` in it names one of
the functions of ``--predicates`` (a mapping of names to functions, or a function of no
argument returning one), never a module to import. ``eval`` exits 0 when every case
passed, 1 when one failed or errored, 2 on bad usage (one line: the dataset, the harness or
the predicates cannot be read).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from innerloop._harness import Harness
from innerloop._messages import Message
from innerloop.evals._dataset import Dataset, DatasetError
from innerloop.evals._report import CaseResult
from innerloop.evals._rerun import rerun_sync
from innerloop.evals._runner import CHECK_SECONDS, Judges, run_eval_sync
from innerloop.fsm._locate import import_target

__all__ = ["add_eval_parser", "add_rerun_parser", "eval_command", "rerun_command"]

EVAL_HELP = """innerloop eval: run a dataset of cases against a harness; report pass rate and cost.

    innerloop eval DATASET --harness MODULE:ATTR [--concurrency N] [--json OUT]
                   [--judge-model PROVIDER:MODEL] [--no-progress]

--harness names a Harness (or a function of no argument returning one). Exits 0 when every
case passed, 1 when one failed or errored, 2 on bad usage.
"""

RERUN_HELP = """innerloop runs rerun: run a stored run again from checkpoint N on another harness.

    innerloop runs rerun RUN_ID --db URL --harness MODULE:ATTR [--at N] [--message TEXT]
                         [--json OUT]

--harness names a Harness (or a function of no argument returning one); both runs are
printed side by side (--json OUT writes the comparison).
"""


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds above 0, got {text!r}")
    return value


def add_eval_parser(subparsers: Any) -> None:
    """Add ``eval`` to the command line's subparsers."""
    p = subparsers.add_parser(
        "eval",
        help="run a dataset of cases against a harness and report pass rate, cost, latency",
        description=EVAL_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("dataset", help="a YAML or JSON dataset file (pydantic-evals' layout)")
    _harness_option(p)
    p.add_argument(
        "--predicates",
        metavar="MODULE:ATTR",
        help="the functions the dataset's Predicate checks name: a mapping of names to "
        "functions (or a function of no argument returning one)",
    )
    p.add_argument("--concurrency", type=_positive, default=8, help="runs at a time (8)")
    p.add_argument("--json", metavar="OUT", help="also write the report as JSON here")
    p.add_argument("--judge-model", metavar="PROVIDER:MODEL", help="the judges' default model")
    p.add_argument(
        "--check-seconds",
        type=_seconds,
        default=CHECK_SECONDS,
        metavar="S",
        help=f"how long one check may take on a case; longer fails the case ({CHECK_SECONDS:g})",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def add_rerun_parser(runs_subparsers: Any) -> argparse.ArgumentParser:
    """Add ``rerun`` to ``innerloop runs``; the caller adds ``--db``."""
    p: argparse.ArgumentParser = runs_subparsers.add_parser(
        "rerun",
        help="run a stored run again from a checkpoint with another harness, and compare",
        description=RERUN_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("run_id")
    _harness_option(p)
    p.add_argument("--at", type=_positive, default=1, help="the checkpoint (default: 1)")
    p.add_argument("--message", help="replace the last user message first with this text")
    p.add_argument("--json", metavar="OUT", help="also write the comparison as JSON here")
    return p


def _harness_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--harness",
        metavar="MODULE:ATTR",
        required=True,
        help="a Harness, or a function of no argument returning one",
    )


def _load_harness(target: str, usage: type[Exception]) -> Harness[Any]:
    try:
        harness: Harness[Any] = import_target(
            target, "harness", "--harness", "mypkg.evals:harness", (Harness,)
        )
    except ValueError as exc:
        raise usage(f"--harness: {exc}") from None
    return harness


def _load_predicates(target: str | None, usage: type[Exception]) -> Mapping[str, Any]:
    """The mapping ``--predicates`` names (the user's own code), its values checked."""
    if target is None:
        return {}
    try:
        found: Mapping[Any, Any] = import_target(
            target, "predicates", "--predicates", "mypkg.evals:PREDICATES", (Mapping,)
        )
    except ValueError as exc:
        raise usage(f"--predicates: {exc}") from None
    for name, fn in found.items():
        if not isinstance(name, str) or not callable(fn):
            raise usage(
                f"--predicates {target}: {name!r} maps to a {type(fn).__name__}; the mapping "
                "holds names (str) and functions of the check context"
            )
    return found


def _writable(path: str | None, usage: type[Exception]) -> None:
    """Refuse a --json file that cannot be written, before anything runs."""
    if path is None:
        return
    folder = Path(path).resolve().parent
    if not folder.is_dir() or not os.access(folder, os.W_OK) or Path(path).is_dir():
        raise usage(f"--json: cannot write {path} (no such folder, a folder, or not writable)")


def _write_json(path: str, data: Any, usage: type[Exception]) -> None:
    try:
        Path(path).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise usage(f"--json: cannot write {path}: {exc.strerror or exc}") from None


def eval_command(args: argparse.Namespace, usage: type[Exception]) -> int:
    """``innerloop eval``: its exit code."""
    predicates = _load_predicates(args.predicates, usage)
    try:
        dataset = Dataset.load(args.dataset, predicates=predicates)
    except DatasetError as exc:
        raise usage(str(exc)) from None
    harness = _load_harness(args.harness, usage)
    _writable(args.json, usage)
    try:  # a judge model no provider serves: refused before the progress bar shows
        Judges(harness, args.judge_model, None).prepare(dataset)
    except ValueError as exc:
        raise usage(f"--judge-model: {exc}" if args.judge_model else str(exc)) from None
    console = Console()
    progress = Progress(
        TextColumn("eval"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[failed]} failed"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        disable=args.no_progress,
        transient=True,
    )
    with progress:
        task = progress.add_task("eval", total=len(dataset.cases), failed=0)
        bad = 0

        def advance(result: CaseResult) -> None:
            nonlocal bad
            bad += result.status != "passed"
            progress.update(task, advance=1, failed=bad)

        report = run_eval_sync(
            dataset,
            harness,
            concurrency=args.concurrency,
            judge_model=args.judge_model,
            on_result=advance,
            check_seconds=args.check_seconds,
        )
    console.print(report)
    if args.json:
        _write_json(args.json, report.to_dict(), usage)
    return 0 if report.ok else 1


def rerun_command(args: argparse.Namespace, usage: type[Exception]) -> int:
    """``innerloop runs rerun``: 0 once compared (whatever the rerun's end)."""
    harness = _load_harness(args.harness, usage)
    _writable(args.json, usage)
    message = args.message

    def edit(state: Any) -> None:
        if message is None:
            return
        for i in range(len(state.history) - 1, -1, -1):
            if state.history[i].role == "user" and state.history[i].text:
                state.history[i] = Message.user(message)
                return
        state.history.append(Message.user(message))

    comparison = rerun_sync(harness, args.run_id, at=args.at, edit=edit, store=args.db)
    Console().print(comparison)
    if args.json:
        _write_json(args.json, comparison.to_dict(), usage)
    sys.stdout.flush()
    return 0
