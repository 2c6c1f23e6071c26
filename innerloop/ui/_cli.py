"""``innerloop ui``, and the ``--ui`` options of ``innerloop run`` and ``innerloop demo``.

    innerloop ui [--runs DIR] [--db URL] [--port N] [--host H] [--spec MODULE:ATTR]... [--open]
                 [--harness MODULE:ATTR]

``--ui`` serves the page while the command's run goes on and prints the run's URL. The
server stops when the command ends; with ``--ui-wait`` it goes on serving after the run
until Ctrl-C. A browser is opened only with ``--ui-open`` (``--open`` for ``ui``).
"""

from __future__ import annotations

import argparse
import contextlib
import threading
import webbrowser
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from innerloop._harness import Harness
from innerloop.checkpoint import Checkpointer, open_checkpointer, store_errors
from innerloop.fsm._compile import CompiledMachine
from innerloop.fsm._locate import import_target, load_spec
from innerloop.fsm._spec import MachineSpec
from innerloop.ui._catalog import Catalog
from innerloop.ui._server import DEFAULT_PORT, UIServer

__all__ = ["open_store", "run", "serving", "wait_for_interrupt"]

DEFAULT_RUNS = Path("runs")


Usage = Callable[[str], Exception]
"""Makes the command line's usage error (printed in one line, exit status 2)."""


def _sqlite_path(url: str) -> str | None:
    """The file of a SQLite URL (or plain path); None for any other store."""
    if url.startswith("sqlite:///"):
        return url.removeprefix("sqlite:///")
    return None if url == "memory:" or "://" in url else url


def open_store(url: str, usage: Usage = ValueError) -> Checkpointer:
    """The checkpoint store at ``url``, to read; an error when it cannot be
    opened (``usage`` makes it). A SQLite file must exist (a viewer creates none)."""
    path = _sqlite_path(url)
    if path is not None and not Path(path).is_file():
        raise usage(f"--db: no SQLite file {path!r} (a store is created by a run's --db)")
    try:
        return open_checkpointer(url)
    except store_errors() as exc:
        raise usage(f"--db: {str(exc).strip().splitlines()[0]}") from None


def _machines(targets: Sequence[str], usage: Usage) -> list[MachineSpec]:
    try:
        return [load_spec(target) for target in targets]
    except ValueError as exc:
        raise usage(f"--spec: {exc}") from None


def _harness(target: str | None, usage: Usage) -> Harness[Any] | None:
    """The harness ``--harness`` names (the user's own code), with its checkpoint store."""
    if target is None:
        return None
    try:
        harness: Harness[Any] = import_target(
            target, "harness", "--harness", "mypkg.agent:harness", (Harness,)
        )
    except ValueError as exc:
        raise usage(f"--harness: {exc}") from None
    if harness.checkpointer is None:
        raise usage(
            f"--harness: {target} has no checkpoint store: the page answers a run through "
            "the store that keeps it; build the Harness with checkpointer='sqlite:///runs.db'"
        )
    return harness


def _start(server: UIServer, usage: Usage) -> UIServer:
    try:
        return server.start()
    except OSError as exc:
        raise usage(str(exc)) from None


def _port(port: int | None) -> int:
    return DEFAULT_PORT if port is None else port


def wait_for_interrupt(server: UIServer, interrupts: type[BaseException]) -> None:
    """Block until ``interrupts`` (the command line's Ctrl-C exception) is raised."""
    done = threading.Event()
    with contextlib.suppress(interrupts):
        while server.running:
            done.wait(0.2)


def run(args: argparse.Namespace, interrupts: type[BaseException], usage: Usage) -> int:
    """Run the ``ui`` command until Ctrl-C; exit status 0."""
    runs_dir = args.runs
    if runs_dir is not None and not runs_dir.is_dir():
        raise usage(f"--runs: no folder {str(runs_dir)!r}")
    if runs_dir is None and DEFAULT_RUNS.is_dir():
        runs_dir = DEFAULT_RUNS
    harness = _harness(getattr(args, "harness", None), usage)
    store = open_store(args.db, usage) if args.db else None
    if store is None and harness is not None:
        store = harness.checkpointer  # the store it answers in is the one listed
    machines = _machines(args.spec, usage) + ([harness.machine.spec] if harness else [])
    catalog = Catalog(runs_dir, store, machines)
    server = _start(UIServer(catalog, args.host, _port(args.port), harness=harness), usage)
    try:
        where = [
            f"event logs in {runs_dir}/" if runs_dir else "",
            f"store {args.db}" if store else "",
        ]
        print(f"innerloop ui: {server.url} ({', '.join(w for w in where if w) or 'no runs yet'})")
        print("Ctrl-C stops it", flush=True)
        if args.open:
            webbrowser.open(server.url)
        wait_for_interrupt(server, interrupts)
    finally:
        server.stop()
    return 0


@contextlib.contextmanager
def serving(
    args: argparse.Namespace,
    log: Path | None,
    interrupts: type[BaseException],
    usage: Usage,
    machines: Sequence[MachineSpec | CompiledMachine] = (),
) -> Iterator[UIServer | None]:
    """With ``--ui``: the page for the run logged to ``log`` (drawn on ``machines``, the
    command's own: the log's recorded import paths are never imported), served for the
    block (and after it until Ctrl-C with ``--ui-wait``); its URL printed. Without:
    nothing."""
    if not getattr(args, "ui", False) or log is None:
        yield None
        return
    catalog = Catalog(files=(log,), machines=machines)
    server = _start(UIServer(catalog, args.ui_host, _port(args.ui_port)), usage)
    try:
        url = server.run_url(f"log:{log.name}:last")
        print(f"live view: {url}", flush=True)
        if args.ui_open:
            webbrowser.open(url)
        yield server
        if args.ui_wait:
            print(f"live view: {url} (serving until Ctrl-C)", flush=True)
            wait_for_interrupt(server, interrupts)
    finally:
        server.stop()
