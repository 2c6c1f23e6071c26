"""The web application (Starlette): the page, its JSON endpoints and the live stream.

    GET /                        the page (plain HTML, CSS and JS shipped in the package)
    GET /api/runs                every run: id, source, status, exit reason, turns, cost, error
                                 (``?offset=&limit=`` pages them; ``total`` counts them)
    GET /api/run/{id}            one run: summary, the latest rows of its transitions, tool
                                 calls, tokens per turn and recoveries, and their ``totals``
                                 (``?list=transitions&offset=&limit=``: one page of one list)
    GET /api/diagram/{id}        the machine's SVG with the run's trace (edge counts)
    GET /api/events/{id}         server-sent events: the run's detail, then at each change
                                 its summary and the rows added since the client's last
                                 event id (``Last-Event-ID``), then ``end`` once it finished
    ?child=PATH                  on the three above: the run's child run at that path
                                 (``survey/web#2``; a run's detail lists its ``children``)
    ?open=ID (repeated)          on the diagram: the child clusters drawn open (``survey__``,
                                 ``survey__web__``), each other child one node (an empty
                                 ``open=``: none open); without it, every cluster is open
    ?taken=1                     on the diagram: only the states and edges the run used
    POST /api/answer/{id}        answer the question the run waits on: JSON ``{"interrupt":
                                 ID, "answer": VALUE}``, from the page only (its header
                                 ``X-Innerloop-Page`` and a same-origin request); lands in
                                 ``harness.resume`` (see ``_answer.py``); 202 once resumed
    GET /evals, /compare/{id}    eval reports and reruns compared (see ``_reports.py``)

Only requests naming a loopback host (``127.0.0.1``, ``localhost``, ``[::1]``) or the host
the server was given in their ``Host`` header are answered (a page elsewhere cannot rebind
its name to this server: DNS rebinding); with a ``token``, the page and the API also want
``?token=...`` (the static files, which hold no data, do not). Anything else is a 403
whose body is the one line saying why.

Every answer carries ``X-Content-Type-Options: nosniff``, ``X-Frame-Options: DENY`` and a
``Content-Security-Policy`` (:data:`SECURITY_HEADERS`) allowing the page's own scripts,
styles and connections only: no inline script or style, no other origin, no framing.

A run id is ``log:FILE:N`` (``log:FILE:last`` follows a log's latest run) or ``db:RUN_ID``;
an unknown one is a 404 whose JSON ``error`` says what ids look like.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import secrets
import threading
import urllib.parse
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from sse_starlette import EventSourceResponse
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from innerloop._errors import ResumeError
from innerloop._messages import encodable_json
from innerloop._secrets import scrub_secrets
from innerloop.checkpoint import store_errors
from innerloop.diagrams import GraphvizNotFound
from innerloop.fsm import MachineNotFound
from innerloop.ui._answer import Answers
from innerloop.ui._catalog import PAGE, Catalog, UnknownRun
from innerloop.ui._reports import report_routes
from innerloop.ui._view import LISTS

__all__ = ["LOOPBACK_HOSTS", "PAGE_HEADER", "STATIC", "Guard", "create_app", "host_name"]

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "[::1]"})
"""The host names a request may name in its ``Host`` header (with the server's port)."""

STATIC = Path(__file__).resolve().parent / "static"
POLL_SECONDS = 0.1
"""How often a live stream looks for new events (a log's size, a store's checkpoints)."""
RUNS_PAGE = 1000
"""The runs ``/api/runs`` lists at most at once (``?offset=`` pages on)."""
PAGE_HEADER = "x-innerloop-page"
"""The header an answer carries the page's key in (the page has it in its ``<meta>``)."""
PAGE_KEY_SLOT = 'content="PAGE-KEY"'
"""Where ``index.html`` holds the key of the page served (a new one each launch)."""
ANSWER_BYTES = 64 * 1024
"""The largest answer body read."""


def _json(data: Any) -> Response:
    """``data`` as JSON, scrubbed of keys and tokens (tool outputs and errors hold them)."""
    return Response(_text(data), media_type="application/json")


def _not_found(exc: UnknownRun) -> JSONResponse:
    return JSONResponse({"error": str(exc)}, status_code=404)


def _bad_query(message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=400)


def _number(request: Request, name: str, default: int) -> int:
    """Query parameter ``name``, a whole number not below 0 (ValueError otherwise)."""
    value = request.query_params.get(name)
    if value is None:
        return default
    if not value.isdigit():
        raise ValueError(f"?{name}= wants a whole number from 0 up, not {value!r}")
    return int(value)


async def _runs(catalog: Catalog, request: Request) -> Response:
    try:
        offset, limit = _number(request, "offset", 0), _number(request, "limit", RUNS_PAGE)
    except ValueError as exc:
        return _bad_query(str(exc))
    every = await run_in_threadpool(catalog.runs)
    return _json({"runs": every[offset : offset + limit], "offset": offset, "total": len(every)})


async def _run(catalog: Catalog, answers: Answers | None, request: Request) -> Response:
    """One run's detail, or one page of one of its lists (``?list=``)."""
    run_id = request.path_params["run_id"]
    kind, child = request.query_params.get("list"), request.query_params.get("child")
    try:
        offset, limit = _number(request, "offset", 0), _number(request, "limit", PAGE)
    except ValueError as exc:
        return _bad_query(str(exc))
    if kind is not None and kind not in LISTS:
        return _bad_query(f"?list= is one of {', '.join(LISTS)}, not {kind!r}")
    try:
        if kind is None:
            detail = await run_in_threadpool(catalog.detail, run_id, limit, child)
            detail |= await run_in_threadpool(_answering, catalog, answers, detail)
        else:
            detail = await run_in_threadpool(catalog.page, run_id, kind, offset, limit, child)
    except UnknownRun as exc:
        return _not_found(exc)
    return _json(detail)


def _answering(catalog: Catalog, answers: Answers | None, detail: dict[str, Any]) -> dict[str, Any]:
    """Whether the page can answer the question a run's detail waits on
    (``answerable``), and why not (``answer_note``)."""
    asked = [a for a in detail.get("interrupts") or [] if a.get("id")]
    if not asked:
        return {"answerable": False, "answer_note": None}
    if answers is None:
        return {"answerable": False, "answer_note": NO_HARNESS}
    try:
        stored, _ = catalog.kept_as(detail["id"])
    except UnknownRun:
        stored = None
    if stored is None:
        note = (
            f"run {detail['id']} is kept in no checkpoint store (its log records no run id): "
            "the page answers runs a store keeps (run it with a checkpointer, or --db)"
        )
        return {"answerable": False, "answer_note": note}
    return {"answerable": True, "answer_note": None}


NO_HARNESS = (
    "this live view answers no questions: serve it with the run's harness (innerloop ui "
    "--harness MODULE:ATTR, or UIServer(catalog, harness=...)), or answer with innerloop "
    "runs resume RUN_ID --interrupt ID --answer JSON"
)


def _refused(status: int, message: str) -> Response:
    return Response(message + "\n", status_code=status, media_type="text/plain")


def _not_from_the_page(request: Request, key: str) -> str | None:
    """Why a POST did not come from the page itself, if it did not: another site's
    (``Sec-Fetch-Site``, ``Origin``), or without the page's key."""
    fetched = request.headers.get("sec-fetch-site")
    if fetched is not None and fetched != "same-origin":
        return f"a {fetched} request refused: answers come from the live view's own page only"
    origin = request.headers.get("origin")
    own = f"{request.url.scheme}://{request.headers.get('host', '')}".lower()
    if origin is not None and origin.lower() != own:
        return f"origin {origin!r} refused: answers come from the live view's own page only ({own})"
    given = request.headers.get(PAGE_HEADER, "")
    if not hmac.compare_digest(given.encode(), key.encode()):
        return (
            f"the page's key is missing or wrong (header {PAGE_HEADER}): answer from the "
            "live view's page (reload it: a key is good for one launch of the server)"
        )
    return None


async def _answer_body(request: Request) -> tuple[str, Any]:
    """The interrupt id and the answer of an answer's JSON body; ValueError saying what
    is wrong with it."""
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
        raise ValueError("an answer is JSON: send Content-Type: application/json")
    body = await request.body()
    if len(body) > ANSWER_BYTES:
        raise ValueError(f"an answer is at most {ANSWER_BYTES:,} bytes")
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise ValueError(f"the body is not JSON ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("interrupt"), str):
        raise ValueError('the body is {"interrupt": ID, "answer": VALUE} (ID: a string)')
    if "answer" not in data or data["answer"] is None:
        raise ValueError('the body has no "answer" (true, false, text or any JSON)')
    return data["interrupt"], data["answer"]


async def _answer(
    catalog: Catalog, answers: Answers | None, key: str, request: Request
) -> Response:
    """Answer the question a run waits on, from the page (see ``POST /api/answer``)."""
    refusal = _not_from_the_page(request, key)
    if refusal is not None:
        return _refused(403, refusal)
    run_id = request.path_params["run_id"]
    try:
        interrupt, value = await _answer_body(request)
    except ValueError as exc:
        return _bad_query(str(exc))
    if answers is None:
        return JSONResponse({"error": NO_HARNESS}, status_code=409)
    try:
        stored, log = await run_in_threadpool(catalog.kept_as, run_id)
        if stored is None:
            detail = {"id": run_id, "interrupts": [{"id": interrupt}]}
            note = _answering(catalog, answers, detail)["answer_note"]
            return JSONResponse({"error": note}, status_code=409)
        await run_in_threadpool(answers.answer, stored, interrupt, value, log)
    except UnknownRun as exc:
        return _not_found(exc)
    except _refusals() as exc:
        return JSONResponse({"error": str(exc)}, status_code=409)
    return JSONResponse({"run": run_id, "interrupt": interrupt, "resumed": True}, status_code=202)


def _refusals() -> tuple[type[Exception], ...]:
    """What an answer that cannot be taken raises: the resume's refusal (another
    question, answered already), a store that cannot be used."""
    return (ResumeError, *store_errors())


def _diagram_error(exc: Exception) -> JSONResponse:
    """404 for an unknown run, 503 without Graphviz, 409 for a run whose machine is not
    at hand or does not have the edges it took (the page shows the one line saying so
    instead of the diagram)."""
    if isinstance(exc, UnknownRun):
        return _not_found(exc)
    status = 503 if isinstance(exc, GraphvizNotFound) else 409
    return JSONResponse({"error": str(exc)}, status_code=status)


def host_name(host: str) -> str:
    """``host`` as a ``Host`` header names it (an IPv6 address in brackets)."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host.lower()


CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
"""The page's own scripts, styles and API only (nothing inline, nothing from elsewhere)."""

SECURITY_HEADERS = (
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
)
"""Sent with every answer of the live view (a 403 too)."""


class _Secured:
    """``send`` adding :data:`SECURITY_HEADERS` to the start of each response (an object
    of one slot, not a closure: a stream holds it as long as it lasts)."""

    __slots__ = ("send",)

    def __init__(self, send: Send) -> None:
        self.send = send

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", ()), *SECURITY_HEADERS]}
        await self.send(message)


class Guard:
    """Answers only requests whose ``Host`` is one of ``hosts`` (with or without the
    server's port) and, with a ``token``, that carry it (``?token=``, or with ``bearer``
    an ``Authorization: Bearer`` header), but for ``/static``; every answer with
    :data:`SECURITY_HEADERS`. ``name`` is what the refusals call the server."""

    def __init__(
        self,
        app: ASGIApp,
        hosts: frozenset[str],
        token: str | None,
        *,
        bearer: bool = False,
        name: str = "the live view",
    ) -> None:
        self.app = app
        self.hosts = hosts
        self.token = token
        self.bearer = bearer
        self.name = name

    def _refusal(self, scope: Scope) -> str | None:
        headers = dict(scope.get("headers") or ())
        host = headers.get(b"host", b"").decode("latin-1").lower()
        server = scope.get("server")
        port = f":{server[1]}" if server else ""
        name = host.removesuffix(port) if port and host.endswith(port) else host
        if name not in self.hosts:
            return (
                f"host {host!r} refused: {self.name} answers only {', '.join(sorted(self.hosts))}"
                " (a page elsewhere may not read it); open it by one of those names"
            )
        if self.token is None or str(scope.get("path", "")).startswith("/static/"):
            return None
        if self.bearer:
            given = headers.get(b"authorization", b"").decode("latin-1")
            if not hmac.compare_digest(given.encode(), f"Bearer {self.token}".encode()):
                return (
                    "bearer token missing or wrong: send the header 'Authorization: Bearer "
                    "TOKEN' with the token the server printed (or was given)"
                )
            return None
        query = urllib.parse.parse_qs(scope.get("query_string", b"").decode("latin-1"))
        given = (query.get("token") or [""])[0]
        if not hmac.compare_digest(given.encode(), self.token.encode()):
            return "token missing or wrong: open the URL the server printed (it holds ?token=...)"
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            send = _Secured(send)
        refusal = self._refusal(scope) if scope["type"] in ("http", "websocket") else None
        if refusal is None:
            await self.app(scope, receive, send)
            return
        response = Response(refusal + "\n", status_code=403, media_type="text/plain")
        await response(scope, receive, send)


def create_app(
    catalog: Catalog,
    closing: threading.Event | None = None,
    *,
    host: str | None = None,
    token: str | None = None,
    answers: Answers | None = None,
) -> ASGIApp:
    """The application serving ``catalog``, answering requests that name a loopback host
    or ``host``, and (with ``token``) carry ``?token=``. Live streams end when ``closing``
    is set. With ``answers``, the page answers the questions runs wait on."""
    closing = closing or threading.Event()
    hosts = LOOPBACK_HOSTS | ({host_name(host)} if host else set())
    key = secrets.token_urlsafe(24)
    page = (STATIC / "index.html").read_text(encoding="utf-8")
    page = page.replace(PAGE_KEY_SLOT, f'content="{key}"')

    async def index(request: Request) -> Response:
        return HTMLResponse(page, headers={"cache-control": "no-store"})

    async def runs(request: Request) -> Response:
        return await _runs(catalog, request)

    async def run(request: Request) -> Response:
        return await _run(catalog, answers, request)

    async def answer(request: Request) -> Response:
        return await _answer(catalog, answers, key, request)

    async def diagram(request: Request) -> Response:
        run_id, child = request.path_params["run_id"], request.query_params.get("child")
        opened = request.query_params.getlist("open")
        shown = frozenset(o for o in opened if o) if opened else None
        try:
            taken = request.query_params.get("taken") == "1"
            svg = await run_in_threadpool(catalog.diagram, run_id, child, shown, taken=taken)
        except (UnknownRun, GraphvizNotFound, MachineNotFound, ValueError) as exc:
            return _diagram_error(exc)
        return Response(svg, media_type="image/svg+xml")

    async def events(request: Request) -> Response:
        run_id, child = request.path_params["run_id"], request.query_params.get("child")
        last = request.headers.get("last-event-id")
        try:
            first = await run_in_threadpool(catalog.update, run_id, last, child)
        except UnknownRun as exc:
            return _not_found(exc)
        changes = _changes(catalog, answers, run_id, child, first, request, closing)
        return EventSourceResponse(changes, ping=10)

    routes = [
        Route("/", index),
        Route("/api/runs", runs),
        Route("/api/run/{run_id:path}", run),
        Route("/api/diagram/{run_id:path}", diagram),
        Route("/api/events/{run_id:path}", events),
        Route("/api/answer/{run_id:path}", answer, methods=["POST"]),
        *report_routes(catalog),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    return Guard(Starlette(routes=routes), hosts, token)


async def _changes(
    catalog: Catalog,
    answers: Answers | None,
    run_id: str,
    child: str | None,
    first: tuple[str, dict[str, Any]],
    request: Request,
    closing: threading.Event,
) -> AsyncIterator[dict[str, str]]:
    """The run now, then what changed at each change (what the client lacks, by the
    event ids); ``end`` once it is over."""
    follow = run_id.endswith(":last")  # a log's next run may start after this one ends
    sent, update = first
    update |= await run_in_threadpool(_answering, catalog, answers, update)
    yield {"event": "run", "id": sent, "data": _text(update)}
    while (follow or update["status"] == "running") and not closing.is_set():
        await asyncio.sleep(POLL_SECONDS)
        if await request.is_disconnected():
            return
        try:
            key, update = await run_in_threadpool(catalog.update, run_id, sent, child)
        except UnknownRun:  # the log was removed
            break
        if key != sent:
            sent = key
            update |= await run_in_threadpool(_answering, catalog, answers, update)
            yield {"event": "run", "id": key, "data": _text(update)}
    yield {"event": "end", "data": json.dumps({"status": update["status"]})}


def _text(data: Any) -> str:
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return scrub_secrets(encodable_json(text))  # a log's lone surrogates shown escaped
