"""An eval's report: each case's result, and the figures over all of them (pass rate,
tokens, cost, latency percentiles, recovery paths taken), as a rich table and as JSON."""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any, Literal

import attrs
from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.table import Table
from rich.text import Text

from innerloop._messages import Usage
from innerloop.evals._checks import CheckResult, bounded
from innerloop.evals._summary import RECOVERIES, RunSummary, percentile

__all__ = ["CaseResult", "EvalReport", "render_text"]

CaseStatus = Literal["passed", "failed", "error"]


@attrs.frozen
class CaseResult:
    """One case: ``passed`` (every check held), ``failed`` (one did not) or ``error`` (the
    run or a check raised: ``error`` says what)."""

    name: str
    status: CaseStatus
    checks: tuple[CheckResult, ...] = ()
    run: RunSummary | None = None
    error: str | None = attrs.field(default=None, converter=attrs.converters.optional(bounded))

    @property
    def failures(self) -> tuple[CheckResult, ...]:
        return tuple(c for c in self.checks if not c.passed)

    @property
    def cost_usd(self) -> float | None:
        """The run's cost and its checks' (None when any part is unpriced)."""
        parts = [self.run.cost_usd if self.run else 0.0, *(c.cost_usd for c in self.checks)]
        return None if None in parts else sum(p or 0.0 for p in parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "error": self.error,
            "checks": [c.to_dict() for c in self.checks],
            "run": self.run.to_dict() if self.run else None,
        }


def _latency(values: Sequence[float]) -> dict[str, float | None]:
    return {f"p{p}": percentile(values, p) for p in (50, 90, 95, 99)} | {
        "max": max(values, default=None)
    }


@attrs.frozen
class EvalReport:
    """The results of every case, in the dataset's order."""

    results: tuple[CaseResult, ...]
    seconds: float
    """Wall time of the whole eval."""
    concurrency: int
    name: str | None = None

    def count(self, status: CaseStatus) -> int:
        return sum(r.status == status for r in self.results)

    @property
    def passed(self) -> int:
        return self.count("passed")

    @property
    def failed(self) -> int:
        return self.count("failed")

    @property
    def errors(self) -> int:
        return self.count("error")

    @property
    def pass_rate(self) -> float:
        return self.passed / len(self.results) if self.results else 0.0

    @property
    def ok(self) -> bool:
        """Every case passed."""
        return self.passed == len(self.results)

    @property
    def runs(self) -> tuple[RunSummary, ...]:
        return tuple(r.run for r in self.results if r.run is not None)

    @property
    def usage(self) -> Usage:
        """Tokens of every case's run (the judges' are in ``judge_tokens``)."""
        return sum((r.usage for r in self.runs), Usage())

    @property
    def judge_tokens(self) -> int:
        return sum(c.tokens for r in self.results for c in r.checks)

    @property
    def cost_usd(self) -> float | None:
        """Cost of the runs and the judges (None when any part is unpriced)."""
        costs = [r.cost_usd for r in self.results]
        return None if None in costs else sum(c or 0.0 for c in costs)

    def latency(self) -> dict[str, float | None]:
        """Percentiles of the runs' wall times, in seconds (p50, p90, p95, p99, max)."""
        return _latency([r.seconds for r in self.runs if r.seconds is not None])

    def recoveries(self) -> dict[str, int]:
        """For each recovery path, how many runs took it at least once."""
        return {k: sum(bool(getattr(r.recoveries, k)) for r in self.runs) for k in RECOVERIES}

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON data (what ``innerloop eval --json`` writes)."""
        return {
            "name": self.name,
            "cases": len(self.results),
            "passed": self.passed,
            "failed": self.failed,
            "errors": self.errors,
            "pass_rate": self.pass_rate,
            "seconds": self.seconds,
            "concurrency": self.concurrency,
            "usage": attrs.asdict(self.usage),
            "total_tokens": self.usage.total_tokens,
            "judge_tokens": self.judge_tokens,
            "cost_usd": self.cost_usd,
            "latency": self.latency(),
            "recoveries": self.recoveries(),
            "results": [r.to_dict() for r in self.results],
        }

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        """The cases, then the figures over them, fitted to the width: the figures of each
        case whole, its reasons wrapped in the last column, or (where that column would be
        under :data:`WHY_WIDTH`) under the table, each wrapped to the width."""
        figures = self.cases_table(why=False)
        room = options.max_width - console.measure(figures, options=options).maximum
        if room >= WHY_WIDTH + 2 or not any(_why(r) for r in self.results):
            yield self.cases_table()
        else:
            yield figures
            yield self.reasons()
        yield Text()
        yield self.summary_table()

    def cases_table(self, *, why: bool = True) -> Table:
        """One row per case: status, exit reason, turns, tokens, cost, seconds,
        recoveries, and (``why``) why it failed. The figures are never cut nor wrapped;
        the case's name, its recoveries and the reasons wrap."""
        table = Table(
            title=f"eval {self.name}" if self.name else "eval",
            title_justify="left",
            box=box.SIMPLE_HEAD,
            show_edge=False,
            collapse_padding=True,
        )
        table.add_column("case", overflow="fold", min_width=4)
        for column in ("status", "exit"):
            table.add_column(column, no_wrap=True)
        for column in ("turns", "tokens", "cost", "s"):
            table.add_column(column, justify="right", no_wrap=True)
        table.add_column("recoveries", min_width=10)
        if why:
            table.add_column("why", overflow="fold", min_width=WHY_WIDTH)
        style = {"passed": "green", "failed": "red", "error": "bold red"}
        for r in self.results:
            run = r.run
            cells: list[RenderableType] = [
                r.name,
                Text(r.status, style=style[r.status]),
                run.exit_reason or "-" if run else "-",
                str(run.turns) if run else "-",
                f"{run.usage.total_tokens:,}" if run else "-",
                _cost(r.cost_usd),
                f"{run.seconds:.2f}" if run and run.seconds is not None else "-",
                str(run.recoveries) if run else "-",
            ]
            table.add_row(*cells, *([_why(r)] if why else []))
        return table

    def reasons(self) -> Group:
        """Why each case that did not pass failed, a paragraph each (wrapped to the
        width), for a terminal too narrow to hold them beside the figures."""
        return Group(
            *(
                Text.assemble((f"{r.name}:", "bold"), " ", why)
                for r in self.results
                if (why := _why(r))
            )
        )

    def summary_table(self) -> Table:
        """The figures over every case."""
        table = Table(show_header=False, box=None)
        table.add_column(style="bold")
        table.add_column()
        n, lat = len(self.results), self.latency()
        table.add_row(
            "passed",
            f"{self.passed}/{n} ({self.pass_rate:.0%}), {self.failed} failed, {self.errors} errors",
        )
        usage = self.usage
        table.add_row(
            "tokens",
            f"{usage.total_tokens:,} (input {usage.input_tokens:,}, output "
            f"{usage.output_tokens:,}); judges {self.judge_tokens:,}",
        )
        table.add_row("cost", _cost(self.cost_usd))
        table.add_row(
            "latency",
            ", ".join(f"{k} {_seconds(v)}" for k, v in lat.items()),
        )
        runs = len(self.runs)
        table.add_row(
            "recoveries",
            ", ".join(f"{k} {v}/{runs}" for k, v in self.recoveries().items()),
        )
        table.add_row("wall time", f"{self.seconds:.2f} s at concurrency {self.concurrency}")
        return table

    def __str__(self) -> str:
        return render_text(self)


WHY_WIDTH = 30
"""The least width the reasons' column of a report's table gets beside the figures; on a
narrower terminal the reasons go under the table (:meth:`EvalReport.reasons`)."""


def _why(result: CaseResult) -> str:
    return result.error or "; ".join(
        f"{c.name}: {c.reason}" if c.reason else c.name for c in result.failures
    )


def render_text(renderable: Any, width: int = 120) -> str:
    """``renderable`` (a rich renderable) as plain text."""
    console = Console(file=io.StringIO(), width=width, color_system=None, force_terminal=False)
    console.print(renderable)
    return console.file.getvalue()  # type: ignore[attr-defined, no-any-return]


def _cost(value: float | None) -> str:
    return "unpriced" if value is None else f"${value:.4f}"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.1f} ms" if value < 1 else f"{value:.2f} s"
