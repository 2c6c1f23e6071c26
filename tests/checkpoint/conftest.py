"""Checkpoint stores for the tests: in memory, a SQLite file, and a real PostgreSQL server
(Debian's binaries, one throwaway cluster per session, one database per test)."""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from innerloop.checkpoint import Checkpointer, open_checkpointer
from tests.durable._procs import PostgresServer, Processes


@pytest.fixture(scope="session")
def pg_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresServer]:
    owner = Processes(tmp_path_factory.mktemp("pg-logs"))
    # a directory of its own: the server's user may not enter pytest's private tmp dirs
    root = Path(tempfile.mkdtemp(prefix="innerloop-ckpt-pg-"))
    server = PostgresServer(owner, root)
    try:
        server.start()
        yield server
    finally:
        owner.close()
        shutil.rmtree(root, ignore_errors=True)


def fresh_database(server: PostgresServer) -> str:
    name = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(server.url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return server.url.rsplit("/", 1)[0] + "/" + name


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store URL that a second process (or a second store object) can open again."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'runs.db'}"
    server: PostgresServer = request.getfixturevalue("pg_server")
    return fresh_database(server)


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Checkpointer]:
    """Each of the three stores, fresh."""
    if request.param == "memory":
        url = "memory:"
    elif request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'runs.db'}"
    else:
        url = fresh_database(request.getfixturevalue("pg_server"))
    opened = open_checkpointer(url)
    yield opened
    opened.close()
