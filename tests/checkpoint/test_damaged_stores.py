"""Stores that cannot be used: a file that is no database, trashed pages, a folder, a
schema version that is no number, a database without innerloop's tables. The store says
so with a ``CheckpointError`` (never a driver's error or a bare ``ValueError``), and the
command line prints one line on stderr and exits 2."""

from __future__ import annotations

import contextlib
import gc
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from innerloop.checkpoint import SCHEMA_VERSION, CheckpointError, SQLiteCheckpointer
from tests.test_cli import cli

KEY = {"ANTHROPIC_API_KEY": "sk-ant-cli-test", "NO_COLOR": "1"}


def _good(path: Path) -> Path:
    store = SQLiteCheckpointer(path)
    store.create_run("r1", "innerloop")
    store.close()
    # everything in the main file, none in a WAL
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("PRAGMA journal_mode=DELETE")
    return path


def _not_a_database(path: Path) -> Path:
    path.write_bytes(bytes(range(256)) * 32)
    return path


def _trashed_pages(path: Path) -> Path:
    data = bytearray(_good(path).read_bytes())
    data[4096:] = b"\x5a" * (len(data) - 4096)  # the header page stays; the rest is gone
    path.write_bytes(bytes(data))
    return path


def _a_folder(path: Path) -> Path:
    path.mkdir()
    return path


def _version_abc(path: Path) -> Path:
    with contextlib.closing(sqlite3.connect(_good(path))) as conn, conn:
        conn.execute("UPDATE innerloop_meta SET value = 'abc' WHERE key = 'schema_version'")
    return path


def _no_tables(path: Path) -> Path:
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("CREATE TABLE innerloop_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        conn.execute(
            "INSERT INTO innerloop_meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
        )
    return path


DAMAGE: dict[str, tuple[Callable[[Path], Path], str]] = {
    # kind: (make it, what the one line says)
    "not_a_database": (_not_a_database, "cannot be read (file is not a database)"),
    "trashed_pages": (_trashed_pages, "cannot be read (database disk image is malformed)"),
    "a_folder": (_a_folder, "is a folder, not a SQLite file; name a file in it"),
    "version_abc": (_version_abc, "has checkpoint schema version 'abc', not a number"),
    "no_tables": (_no_tables, "no such table: innerloop_"),
}
OPENED = ("not_a_database", "trashed_pages", "a_folder", "version_abc")
"""The damage the store sees as it opens (the last kind shows on the first read)."""


@pytest.mark.parametrize("kind", OPENED)
def test_the_store_raises_a_checkpoint_error(kind: str, tmp_path: Path) -> None:
    """Opening a damaged file is a CheckpointError that names it and the problem."""
    make, says = DAMAGE[kind]
    path = make(tmp_path / "runs.db")
    with pytest.raises(CheckpointError) as caught:
        SQLiteCheckpointer(path)
    assert says in str(caught.value)
    assert str(path) in str(caught.value)
    assert not isinstance(caught.value.__cause__, CheckpointError)


@pytest.mark.parametrize("kind", list(DAMAGE))
@pytest.mark.parametrize(
    ("command", "prog"),
    [
        (["runs", "list"], "innerloop runs"),
        (["runs", "show", "r1"], "innerloop runs"),
        (["run", "hello", "--base-url", "http://127.0.0.1:9", "--no-live"], "innerloop run"),
    ],
)
def test_the_command_line_says_one_line_and_exits_2(
    kind: str, command: list[str], prog: str, tmp_path: Path
) -> None:
    """``runs list``, ``runs show`` and ``run --db`` on each damaged store: one line on
    stderr naming the problem, no traceback, exit 2, and no table printed."""
    make, says = DAMAGE[kind]
    path = make(tmp_path / "runs.db")
    done = cli(*command, "--db", f"sqlite:///{path}", env=KEY)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"{prog}: error: --db: ")
    assert says in line


def test_a_store_dropped_unclosed_closes_its_file(tmp_path: Path) -> None:
    """A SQLiteCheckpointer nobody closed closes its connection when collected (Python 3.13's
    sqlite3 would warn, ResourceWarning: unclosed database, an error in this suite)."""
    store = SQLiteCheckpointer(tmp_path / "runs.db")
    conn = store._conn
    del store
    gc.collect()
    with pytest.raises(sqlite3.ProgrammingError, match="closed database"):
        conn.execute("SELECT 1")
