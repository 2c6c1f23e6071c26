"""``innerloop serve MODULE:ATTR [--host H] [--port N] [--token T] [--name NAME] [--stdio]``.

Serves the harness ``MODULE:ATTR`` names (a ``Harness``, or a function of no argument
returning one) with uvicorn until Ctrl-C; with ``--stdio``, MCP over stdin and stdout.
On an address other than loopback every request wants ``Authorization: Bearer TOKEN``:
``--token``, or one generated and printed.
"""

from __future__ import annotations

import argparse
import contextlib
import secrets
import socket
from collections.abc import Callable
from typing import Any

from innerloop._harness import Harness
from innerloop.fsm._locate import import_target
from innerloop.ui._server import is_loopback

__all__ = ["YOUNG_OBJECTS", "collect_for_serving", "listen", "load_harness", "run", "serve_on"]

Usage = Callable[[str], Exception]


def load_harness(target: str) -> Harness[Any]:
    """The harness ``module:attr`` names (a function of no argument is called);
    ValueError naming the fix otherwise."""
    harness: Harness[Any] = import_target(
        target, "harness", "innerloop serve", "mypkg.agent:harness", (Harness,)
    )
    return harness


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port``, made with its protocol named: asyncio
    turns Nagle's algorithm off only on connections of such a socket (without it, each
    answer written in two parts waits for the client's delayed ACK: 40 ms a request)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(socket.SOMAXCONN)
    except OSError:
        sock.close()
        raise
    return sock


def run(args: argparse.Namespace, interrupts: type[BaseException], usage: Usage) -> int:
    """Serve until Ctrl-C (or, with ``--stdio``, until stdin closes); exit status 0."""
    try:
        harness = load_harness(args.target)
    except ValueError as exc:
        raise usage(str(exc)) from None
    if args.stdio:
        import anyio

        from innerloop.serve._mcp import mcp_server
        from innerloop.serve._runs import Served

        with contextlib.suppress(interrupts):
            served = Served(harness, runs_dir=args.runs)
            anyio.run(mcp_server(served, args.name).run_stdio_async)
        return 0
    from innerloop.serve._app import app

    token = args.token
    if token is None and not is_loopback(args.host):
        token = secrets.token_urlsafe(24)
    try:
        sock = listen(args.host, args.port)
    except OSError as exc:
        raise usage(
            f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}; "
            "pick another --port (0: a free one) or --host"
        ) from None
    port = sock.getsockname()[1]
    host = f"[{args.host}]" if ":" in args.host else args.host
    base = f"http://{host}:{port}"
    print(
        f"innerloop serve: {base}/v1 (OpenAI chat completions), /mcp (MCP), /ag-ui (AG-UI), "
        "/ai-sdk (the AI SDK's UI message stream), /a2a (A2A); Ctrl-C stops it",
        flush=True,
    )
    if token is not None:
        print(f"bearer token: {token} (send 'Authorization: Bearer {token}')", flush=True)
    application = app(
        harness, name=args.name, host=args.host, token=token, runs_dir=args.runs, public_url=base
    )
    with sock, contextlib.suppress(interrupts):
        serve_on(application, sock)
    return 0


def serve_on(application: Any, sock: socket.socket, **options: Any) -> None:
    """Run ``application`` with uvicorn on ``sock`` until it stops; ``options``, more of
    ``uvicorn.Config``'s. uvicorn parses and writes HTTP with httptools and runs uvloop's
    event loop where they are installed (the serve extra: a stream's bytes cost the server
    0.6 of the CPU they cost with h11 and asyncio's loop, bench/serve.py). The garbage
    collector is set for serving first (:func:`collect_for_serving`)."""
    import uvicorn

    collect_for_serving()
    config = uvicorn.Config(
        application, log_level="warning", timeout_graceful_shutdown=5, **options
    )
    uvicorn.Server(config).run(sockets=[sock])


YOUNG_OBJECTS = 10_000
"""Allocations between two collections of the youngest generation when serving
(Python's default: 700)."""


def collect_for_serving() -> None:
    """What start-up made (modules, schemas, the harness, token tables: some 200,000
    objects) is frozen out of the garbage collector's sight: a full collection walking
    them all held the event loop for hundreds of milliseconds, every stream waiting. And
    the youngest generation is collected every :data:`YOUNG_OBJECTS` allocations, not
    700: with 200 streams in flight most young objects are still alive at a collection,
    so the default's collections each walked them, and promoted them for the next
    generation's to walk again (some 10 ms each); 200 streams took 85 ms of collections,
    18 ms so (in process, bench/serve.py's streams)."""
    import gc

    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_OBJECTS, middle, old)
