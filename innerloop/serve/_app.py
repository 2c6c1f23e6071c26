"""The served application (Starlette): one harness over the protocols its clients speak.

    POST /v1/chat/completions   OpenAI-compatible chat completions (``_openai.py``)
    GET  /v1/models             the one model served (the harness's name)
    /mcp                        MCP, streamable HTTP: the agent as a tool (``_mcp.py``)
    POST /ag-ui                 AG-UI: a thread's run as AG-UI events (``_agui.py``)
    POST /ai-sdk                the Vercel AI SDK's UI message stream (``_aisdk.py``)
    /a2a                        A2A: JSON-RPC and the agent card (``_a2a.py``)

Requests are answered only when they name a loopback host or the host the server was
given (the live view's check: no DNS rebinding), and with a ``token``, only when they carry
``Authorization: Bearer TOKEN``. A body over ``max_body_bytes`` is a 413, one not read
within ``body_seconds`` a 408, bad JSON a 400: each a JSON ``error`` whose message says
what to send instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from innerloop._errors import ResumeError, SessionError
from innerloop._harness import Harness
from innerloop.serve._openai import chat_completions
from innerloop.serve._runs import Gone, Refused, Served
from innerloop.ui._app import LOOPBACK_HOSTS, Guard, host_name

__all__ = ["MAX_BODY_BYTES", "ServedApp", "app"]

MAX_BODY_BYTES = 1 << 20
"""The largest request body read (1 MiB)."""
BODY_SECONDS = 30.0
"""How long a request body may take to arrive."""

Handler = Callable[[Served, Request, dict[str, Any]], Awaitable[Response]]


def _error(refused: Refused) -> JSONResponse:
    """An error as OpenAI's API shapes them (its SDK raises it with the message)."""
    status = refused.status
    kind = "invalid_request_error" if status < 500 else "server_error"
    return JSONResponse({"error": {"message": str(refused), "type": kind}}, status_code=status)


async def _body(request: Request, limit: int, seconds: float) -> dict[str, Any]:
    """The request's JSON object (:class:`Refused` when too big, too slow or not one)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise Refused(413, f"request body of {declared} bytes: at most {limit} are read")
    parts, size = [], 0
    try:
        async with asyncio.timeout(seconds):
            async for part in request.stream():
                size += len(part)
                if size > limit:
                    raise Refused(413, f"request body over {limit} bytes: at most {limit} are read")
                parts.append(part)
    except TimeoutError:
        raise Refused(408, f"request body not received within {seconds:g} s") from None
    try:
        body = json.loads(b"".join(parts))
    except (ValueError, RecursionError) as exc:
        raise Refused(
            400, f"request body is not JSON ({exc}); send one JSON object", unparsed=True
        ) from None
    if not isinstance(body, dict):
        raise Refused(400, "request body: one JSON object is wanted")
    return body


class _Endpoint:
    """One POST route of a run (``handler``) as a plain ASGI app: Starlette's route wraps
    a function endpoint in closures and coroutines of its own for each request, which a
    stream holds as long as it lasts (every full garbage collection walks them, 200
    streams waiting: bench/serve.py)."""

    def __init__(
        self,
        served: Served,
        handler: Handler,
        limit: int,
        seconds: float,
        error: Callable[[Refused], Response] | None = None,
    ) -> None:
        self.served, self.handler, self.limit, self.seconds = served, handler, limit, seconds
        self.error = error or _error
        """The response to a refused request (its HTTP status, what to send instead)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = await self.answer(Request(scope, receive))
        await response(scope, receive, send)

    async def answer(self, request: Request) -> Response:
        try:
            body = await _body(request, self.limit, self.seconds)
            await self.served.turns.take()  # 200 arriving at once: set up over some turns
            async with Gone(request.receive):  # a client gone meanwhile: its run aborted
                return await self.handler(self.served, request, body)
            return Response(status_code=499)  # no one reads it
        except ClientDisconnect:  # gone before its body was whole: nothing ran
            return Response(status_code=499)
        except Refused as exc:
            return self.error(exc)
        except (SessionError, ResumeError) as exc:
            return self.error(Refused(409, str(exc)))


def _route_path(scope: Scope) -> str:
    """The path a request names within the app (mounted, under its ``root_path``)."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root) else path


class _Direct:
    """``routes`` (path: ASGI app) answered without going through ``inner`` (a Starlette
    app: its middleware and router add coroutines and closures to every request) when
    POSTed to; everything else goes to ``inner``."""

    def __init__(self, routes: dict[str, ASGIApp], inner: ASGIApp) -> None:
        self.routes, self.inner = routes, inner

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            route = self.routes.get(_route_path(scope))
            if route is not None:
                await route(scope, receive, send)
                return
        await self.inner(scope, receive, send)


def app(
    harness: Harness[Any],
    *,
    name: str = "innerloop",
    host: str | None = None,
    token: str | None = None,
    secret: bytes | None = None,
    max_body_bytes: int = MAX_BODY_BYTES,
    body_seconds: float = BODY_SECONDS,
    runs_dir: str | Path | None = None,
    public_url: str = "http://127.0.0.1:8000",
) -> ServedApp:
    """An ASGI application serving ``harness`` (mount it in your own, or run it with
    ``innerloop serve``). It answers requests naming a loopback host or ``host``; with a
    ``token``, only those with ``Authorization: Bearer TOKEN``. ``secret`` keys the
    conversations' tokens (random per app by default: give one to keep them valid across
    restarts). ``name`` is the model name ``/v1/models`` lists. With ``runs_dir``, each
    run's events are logged there (one JSONL event log a run: ``innerloop ui --runs DIR``
    shows them live). ``public_url`` is where clients reach the app (the A2A agent card
    names it)."""
    from innerloop.serve._a2a import A2A, a2a_card_routes, refused
    from innerloop.serve._agui import ag_ui_run
    from innerloop.serve._aisdk import ai_sdk_chat
    from innerloop.serve._mcp import mcp_app

    served = Served(harness, secret, None if runs_dir is None else Path(runs_dir))
    mcp = mcp_app(served, name, max_body_bytes)

    async def models(request: Request) -> Response:
        return JSONResponse(
            {
                "object": "list",
                "data": [{"id": name, "object": "model", "created": 0, "owned_by": "innerloop"}],
            }
        )

    @contextlib.asynccontextmanager
    async def lifespan(_: Any) -> AsyncIterator[None]:
        async with mcp.router.lifespan_context(mcp):
            yield
        await served.wait()

    runs = {
        path: _Endpoint(served, handler, max_body_bytes, body_seconds)
        for path, handler in (
            ("/v1/chat/completions", chat_completions),
            ("/ai-sdk", ai_sdk_chat),
            ("/ag-ui", ag_ui_run),
        )
    }
    runs["/a2a"] = _Endpoint(served, A2A(), max_body_bytes, body_seconds, refused)
    routes = [
        *(Route(path, endpoint, methods=["POST"]) for path, endpoint in runs.items()),
        Route("/v1/models", models),
        *a2a_card_routes(name, f"{public_url.rstrip('/')}/a2a"),
        Mount("/", mcp),
    ]
    hosts = LOOPBACK_HOSTS | ({host_name(host)} if host else set())
    inner = _Direct(dict(runs), Starlette(routes=routes, lifespan=lifespan))
    return ServedApp(inner, hosts, token, f"the served harness {name!r}", lifespan)


class ServedApp(Guard):
    """The served harness (what :func:`app` returns). Mounted in an application of your
    own, give that one its ``lifespan`` (MCP's sessions live in it; a mounted app gets no
    lifespan events of its own): ``Starlette(routes=[Mount("/agent", served)],
    lifespan=served.lifespan)``."""

    def __init__(
        self,
        inner: ASGIApp,
        hosts: frozenset[str],
        token: str | None,
        name: str,
        lifespan: Callable[[Any], contextlib.AbstractAsyncContextManager[None]],
    ) -> None:
        super().__init__(inner, hosts, token, bearer=True, name=name)
        self.lifespan = lifespan
