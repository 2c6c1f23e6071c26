"""The web application (Starlette): the page, its JSON endpoints and the live stream.

    GET /                        the page (plain HTML, CSS and JS shipped in the package)
    GET /api/runs                every run: id, source, status, exit reason, turns, cost, error
    GET /api/run/{id}            one run: summary, transitions, tool calls, tokens per turn
    GET /api/diagram/{id}        the machine's SVG with the run's trace (edge counts)
    GET /api/events/{id}         server-sent events: the run's detail each time it changes,
                                 then ``end`` once it finished

A run id is ``log:FILE:N`` (``log:FILE:last`` follows a log's latest run) or ``db:RUN_ID``;
an unknown one is a 404 whose JSON ``error`` says what ids look like.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from sse_starlette import EventSourceResponse
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from innerloop._secrets import scrub_secrets
from innerloop.diagrams import GraphvizNotFound
from innerloop.fsm import MachineNotFound
from innerloop.ui._catalog import Catalog, UnknownRun

__all__ = ["STATIC", "create_app"]

STATIC = Path(__file__).resolve().parent / "static"
POLL_SECONDS = 0.1
"""How often a live stream looks for new events (a log's size, a store's checkpoints)."""


def _json(data: Any) -> Response:
    """``data`` as JSON, scrubbed of keys and tokens (tool outputs and errors hold them)."""
    text = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return Response(scrub_secrets(text), media_type="application/json")


def _not_found(exc: UnknownRun) -> JSONResponse:
    return JSONResponse({"error": str(exc)}, status_code=404)


def _diagram_error(exc: Exception) -> JSONResponse:
    """404 for an unknown run, 503 without Graphviz, 409 for a run whose machine is not
    at hand (the page shows the one line saying so instead of the diagram)."""
    if isinstance(exc, UnknownRun):
        return _not_found(exc)
    status = 503 if isinstance(exc, GraphvizNotFound) else 409
    return JSONResponse({"error": str(exc)}, status_code=status)


def create_app(catalog: Catalog, closing: threading.Event | None = None) -> Starlette:
    """The application serving ``catalog``. Live streams end when ``closing`` is set."""
    closing = closing or threading.Event()

    async def index(request: Request) -> Response:
        return FileResponse(STATIC / "index.html", media_type="text/html")

    async def runs(request: Request) -> Response:
        return _json({"runs": await run_in_threadpool(catalog.runs)})

    async def run(request: Request) -> Response:
        try:
            detail = await run_in_threadpool(catalog.detail, request.path_params["run_id"])
        except UnknownRun as exc:
            return _not_found(exc)
        return _json(detail)

    async def diagram(request: Request) -> Response:
        try:
            svg = await run_in_threadpool(catalog.diagram, request.path_params["run_id"])
        except (UnknownRun, GraphvizNotFound, MachineNotFound) as exc:
            return _diagram_error(exc)
        return Response(svg, media_type="image/svg+xml")

    async def events(request: Request) -> Response:
        run_id = request.path_params["run_id"]
        try:
            first = await run_in_threadpool(catalog.detail, run_id)
        except UnknownRun as exc:
            return _not_found(exc)
        return EventSourceResponse(_changes(catalog, run_id, first, request, closing), ping=10)

    routes = [
        Route("/", index),
        Route("/api/runs", runs),
        Route("/api/run/{run_id:path}", run),
        Route("/api/diagram/{run_id:path}", diagram),
        Route("/api/events/{run_id:path}", events),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    return Starlette(routes=routes)


async def _changes(
    catalog: Catalog,
    run_id: str,
    detail: dict[str, Any],
    request: Request,
    closing: threading.Event,
) -> AsyncIterator[dict[str, str]]:
    """The run's detail now and at each change; ``end`` once it is over."""
    follow = run_id.endswith(":last")  # a log's next run may start after this one ends
    sent = scrub_secrets(json.dumps(detail))
    yield {"event": "run", "data": sent}
    while (follow or detail["status"] == "running") and not closing.is_set():
        await asyncio.sleep(POLL_SECONDS)
        if await request.is_disconnected():
            return
        try:
            detail = await run_in_threadpool(catalog.detail, run_id)
        except UnknownRun:  # the log was removed
            break
        text = scrub_secrets(json.dumps(detail))
        if text != sent:
            sent = text
            yield {"event": "run", "data": text}
    yield {"event": "end", "data": json.dumps({"status": detail["status"]})}
