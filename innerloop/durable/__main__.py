"""Run a durable worker: ``python -m innerloop.durable temporal-worker --app pkg.mod:app``.

``--app`` names a :class:`~innerloop.durable.LoopApp` as ``module:attribute`` (the module
must be importable by the worker). Every worker of a task queue needs the same app.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import signal
import sys
from collections.abc import Sequence
from datetime import timedelta

from innerloop.durable._app import LoopApp


def load_app(spec: str) -> LoopApp:
    """The LoopApp named ``module:attribute``."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise SystemExit(f"--app: expected 'module:attribute', got {spec!r}")
    app = getattr(importlib.import_module(module_name), attr)
    if not isinstance(app, LoopApp):
        raise SystemExit(f"--app: {spec} is a {type(app).__name__}, not a LoopApp")
    return app


async def _temporal_worker(args: argparse.Namespace) -> None:
    from temporalio.client import Client

    from innerloop.durable._temporal import TemporalOptions, temporal_worker

    app = load_app(args.app)
    client = await Client.connect(args.address, namespace=args.namespace)
    options = TemporalOptions(heartbeat_timeout=args.heartbeat_timeout)
    worker = temporal_worker(
        client,
        app,
        task_queue=args.task_queue,
        options=options,
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=args.sticky_timeout),
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with worker:
        print(f"innerloop worker ready on {args.task_queue}", flush=True)
        await stop.wait()


def _dbos_worker(args: argparse.Namespace) -> None:
    from dbos import DBOS

    from innerloop.durable._dbos import DBOSLoops, dbos_config

    app = load_app(args.app)
    extra = {"executor_id": args.executor_id} if args.executor_id else {}
    DBOS(config=dbos_config(args.database_url, **extra))
    loops = DBOSLoops(app, queue=args.queue)
    DBOS.launch()
    loops.listen()
    print(f"innerloop worker ready on {args.queue}", flush=True)
    try:
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
    finally:
        DBOS.destroy()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m innerloop.durable")
    sub = parser.add_subparsers(dest="command", required=True)
    tw = sub.add_parser("temporal-worker", help="run loops and their steps for a task queue")
    tw.add_argument("--app", required=True, help="the LoopApp, as module:attribute")
    tw.add_argument("--address", default="127.0.0.1:7233", help="Temporal frontend host:port")
    tw.add_argument("--namespace", default="default")
    tw.add_argument("--task-queue", default="innerloop")
    tw.add_argument("--heartbeat-timeout", type=float, default=30.0, help="seconds")
    tw.add_argument(
        "--sticky-timeout",
        type=float,
        default=10.0,
        help="seconds before a dead worker's cached workflows move to another worker",
    )
    dw = sub.add_parser("dbos-worker", help="run loops on DBOS; recovers unfinished ones")
    dw.add_argument("--app", required=True, help="the LoopApp, as module:attribute")
    dw.add_argument(
        "--database-url", default="sqlite:///innerloop.sqlite", help="DBOS system database"
    )
    dw.add_argument("--queue", default="innerloop")
    dw.add_argument("--executor-id", default=None, help="recover this executor's workflows")
    args = parser.parse_args(argv)
    if args.command == "temporal-worker":
        asyncio.run(_temporal_worker(args))
    else:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        _dbos_worker(args)


if __name__ == "__main__":
    main(sys.argv[1:])
