"""Two pages beside the live view: eval reports and reruns compared.

    GET /evals                   every eval report (``innerloop eval --json OUT``) in the
                                 runs folder: its figures, and a row per case
    GET /api/evals               the same as JSON
    GET /compare/{id}            a stored fork (``innerloop runs rerun``, ``Harness.fork``)
                                 beside the run it was forked from: path, output, turns,
                                 tokens, cost, recoveries
    GET /api/compare/{id}        the same as JSON

An id is ``db:RUN_ID`` (or the bare run id) of the checkpoint store. The pages are built on
the server, plain HTML with the live view's style sheet; no script.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from innerloop._json import parse_json
from innerloop._messages import encodable, encodable_json
from innerloop._secrets import scrub_secrets
from innerloop.checkpoint import CheckpointError
from innerloop.evals import RunComparison, compare_fork
from innerloop.ui._catalog import Catalog

__all__ = ["eval_reports", "report_routes"]

REPORT_KEYS = frozenset({"cases", "pass_rate", "results", "latency", "recoveries"})
"""The keys by which a JSON file in the runs folder is known to be an eval report."""


def eval_reports(catalog: Catalog) -> list[dict[str, Any]]:
    """Every eval report in the catalog's runs folder, by file name (newest first)."""
    if catalog.runs_dir is None:
        return []
    found = []
    for path in sorted(catalog.runs_dir.rglob("*.json"), key=_mtime, reverse=True):
        try:
            data = parse_json(path.read_bytes())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.keys() >= REPORT_KEYS:
            found.append({"file": path.relative_to(catalog.runs_dir).as_posix(), **data})
    return found


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _e(value: Any) -> str:
    return html.escape("-" if value is None else str(value))


def _cost(value: Any) -> str:
    return "unpriced" if value is None else f"${value:.4f}"


def _page(title: str, body: str, status: int = 200) -> HTMLResponse:
    """A page, scrubbed of keys and tokens (outputs may hold them)."""
    return HTMLResponse(
        scrub_secrets(
            encodable(
                "<!doctype html><html><head><meta charset='utf-8'>"
                f"<title>innerloop · {_e(title)}</title>"
                "<link rel='stylesheet' href='/static/style.css'></head><body>"
                f"<header><h1>innerloop <span>{_e(title)}</span></h1></header>"
                f"<main>{body}</main></body></html>"
            )
        ),
        status_code=status,
    )


def _json(data: Any, status: int = 200) -> Response:
    """``data`` as JSON, scrubbed of keys and tokens."""
    text = scrub_secrets(encodable_json(json.dumps(data, ensure_ascii=False)))
    return Response(text, status_code=status, media_type="application/json")


def _report_html(report: dict[str, Any]) -> str:
    lat = report.get("latency", {})
    facts = [
        ("passed", f"{report['passed']}/{report['cases']} ({report['pass_rate']:.0%}), "
         f"{report['failed']} failed, {report['errors']} errors"),
        ("tokens", f"{report.get('total_tokens', 0):,}; judges {report.get('judge_tokens', 0):,}"),
        ("cost", _cost(report.get("cost_usd"))),
        ("latency", ", ".join(f"{k} {v * 1000:.1f} ms" for k, v in lat.items() if v is not None)),
        ("recoveries", ", ".join(f"{k} {v}" for k, v in report["recoveries"].items())),
        ("wall time",
         f"{report.get('seconds', 0):.2f} s at concurrency {report.get('concurrency')}"),
    ]  # fmt: skip
    rows = []
    for case in report["results"]:
        run = case.get("run") or {}
        why = case.get("error") or "; ".join(
            f"{c['name']}: {c['reason']}" for c in case.get("checks", []) if not c["passed"]
        )
        taken = ", ".join(f"{k} {v}" for k, v in (run.get("recoveries") or {}).items() if v)
        rows.append(
            f"<tr><td>{_e(case['name'])}</td>"
            f"<td><span class='badge {_badge(case['status'])}'>{_e(case['status'])}</span></td>"
            f"<td>{_e(run.get('exit_reason'))}</td><td class='num'>{_e(run.get('turns'))}</td>"
            f"<td class='num'>{_e(run.get('total_tokens'))}</td>"
            f"<td class='num'>{_e(_cost(run.get('cost_usd')) if run else None)}</td>"
            f"<td>{_e(taken or '-')}</td><td>{_e(why)}</td></tr>"
        )
    head = "".join(f"<th>{h}</th>" for h in ("case", "status", "exit", "turns", "tokens", "cost",
                                              "recoveries", "why"))  # fmt: skip
    fact_rows = "".join(f"<tr><th>{k}</th><td>{_e(v)}</td></tr>" for k, v in facts)
    name = report.get("name") or report["file"]
    return (
        f"<section><h2>{_e(name)} <span class='muted'>{_e(report['file'])}</span></h2>"
        f"<table class='facts'>{fact_rows}</table><h3>cases</h3>"
        f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></section>"
    )


def _report_or_problem(report: dict[str, Any]) -> str:
    """A report's section, or one line saying why the file cannot be shown (a report is a
    file in the runs folder: data, whatever it holds)."""
    try:
        return _report_html(report)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        why = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
        return (
            f"<section><p class='error'>{_e(report['file'])}: not an eval report this page "
            f"can show ({_e(why)})</p></section>"
        )


def _badge(status: str) -> str:
    return {"passed": "finished", "failed": "error", "error": "error"}.get(status, "")


def _comparison_html(c: RunComparison) -> str:
    a, b = c.original, c.rerun
    rows = [
        ("run", a.run_id, b.run_id),
        ("exit reason", a.exit_reason, b.exit_reason),
        ("turns", a.turns, b.turns),
        ("tokens", f"{a.usage.total_tokens:,}", f"{b.usage.total_tokens:,}"),
        ("cost", _cost(a.cost_usd), _cost(b.cost_usd)),
        ("seconds", f"{a.seconds:.3f}" if a.seconds is not None else None,
         f"{b.seconds:.3f}" if b.seconds is not None else None),
        ("recoveries", a.recoveries, b.recoveries),
        ("output", a.output if isinstance(a.output, str) else json.dumps(a.output),
         b.output if isinstance(b.output, str) else json.dumps(b.output)),
    ]  # fmt: skip
    body = "".join(
        f"<tr{' class=differs' if str(x) != str(y) else ''}><th>{k}</th>"
        f"<td>{_e(x)}</td><td>{_e(y)}</td></tr>"
        for k, x, y in rows
    )
    at = c.divergence()

    def path(steps: Any) -> str:
        items = "".join(
            f"<li{' class=differs' if i == at else ''}>{_e(s)}</li>" for i, s in enumerate(steps)
        )
        return f"<ol>{items}</ol>"

    verdict = "same path" if at is None else f"paths differ from step {at + 1}"
    verdict += "; same output" if c.same_output else "; outputs differ"
    return (
        f"<h2>rerun of {_e(c.run_id)} from checkpoint {c.at} "
        f"<span class='muted'>entering {_e(c.state)}, after {len(c.shared)} shared "
        f"transitions</span></h2><p><b>{_e(verdict)}</b></p>"
        f"<table><thead><tr><th></th><th>original</th><th>rerun</th></tr></thead>"
        f"<tbody>{body}<tr><th>path</th><td>{path(a.path)}</td><td>{path(b.path)}</td></tr>"
        "</tbody></table>"
    )


def _compare(catalog: Catalog, run_id: str) -> RunComparison:
    """The comparison of a stored fork; LookupError or ValueError saying why not."""
    if catalog.store is None:
        raise LookupError("no checkpoint store is open: start the view with --db URL")
    return compare_fork(catalog.store, run_id.removeprefix("db:"))


async def _comparison(catalog: Catalog, request: Request, as_json: bool) -> Response:
    """A stored fork beside its parent, as a page or JSON; 404 or 409 saying why not."""
    run_id = request.path_params["run_id"]
    try:
        c = await run_in_threadpool(_compare, catalog, run_id)
    except (LookupError, CheckpointError) as exc:
        status, message = 404, str(exc).strip("'\"")
    except ValueError as exc:
        status, message = 409, str(exc)
    else:
        if as_json:
            return _json(c.to_dict())
        return _page(f"rerun of {c.run_id}", _comparison_html(c))
    if as_json:
        return _json({"error": message}, status)
    return _page("compare", f"<p class='error'>{_e(message)}</p>", status)


def report_routes(catalog: Catalog) -> list[Route]:
    """The routes of the two pages and their JSON."""

    async def compare_page(request: Request) -> Response:
        return await _comparison(catalog, request, as_json=False)

    async def compare_json(request: Request) -> Response:
        return await _comparison(catalog, request, as_json=True)

    async def evals_page(request: Request) -> Response:
        reports = await run_in_threadpool(eval_reports, catalog)
        body = "".join(map(_report_or_problem, reports)) or (
            "<p class='muted'>no eval report in the runs folder yet: "
            "innerloop eval DATASET --harness MODULE:ATTR --json runs/report.json</p>"
        )
        return _page("evals", body)

    async def evals_json(request: Request) -> Response:
        return _json({"reports": await run_in_threadpool(eval_reports, catalog)})

    return [
        Route("/evals", evals_page),
        Route("/api/evals", evals_json),
        Route("/compare/{run_id:path}", compare_page),
        Route("/api/compare/{run_id:path}", compare_json),
    ]
