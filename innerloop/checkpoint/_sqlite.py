"""The embedded default store: one SQLite file (stdlib ``sqlite3``) in WAL mode.

Many processes may write one file: a write takes the file's write lock at its start
(``BEGIN IMMEDIATE``) and waits for it up to ``busy_timeout`` seconds, so no writer ever
sees "database is locked" under ordinary contention; readers never block writers (WAL).
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from innerloop.checkpoint._sql import SQLStore
from innerloop.checkpoint._types import CheckpointError

__all__ = ["SQLiteCheckpointer"]


class SQLiteCheckpointer(SQLStore):
    """Checkpoints in the SQLite file ``path`` (created if missing; ``":memory:"`` too).
    ``close()`` closes the file; a store dropped without it is closed when collected.

    ``synchronous="NORMAL"`` (the default) keeps every committed checkpoint across a
    crash of the process; ``"FULL"`` also across a power loss, at an fsync per commit."""

    def __init__(
        self, path: str | Path, *, busy_timeout: float = 60.0, synchronous: str = "NORMAL"
    ) -> None:
        super().__init__()
        self.path = str(path)
        self.where = f"SQLite file {self.path}"
        if Path(self.path).is_dir():
            raise CheckpointError(
                f"{self.path} is a folder, not a SQLite file; name a file in it "
                f"({Path(self.path) / 'runs.db'})"
            )
        try:
            self._conn = sqlite3.connect(
                self.path, timeout=busy_timeout, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as exc:
            raise CheckpointError(
                f"cannot open the SQLite file {self.path} ({exc}); check that its folder "
                "exists and is writable"
            ) from exc
        try:
            with self._damaged():
                self._open(busy_timeout, synchronous)
        except BaseException:
            self._conn.close()
            raise
        # a store dropped without close() closes its file when collected, as sqlite3 did
        # silently before 3.13 (which warns: ResourceWarning, unclosed database)
        weakref.finalize(self, self._conn.close)

    @contextlib.contextmanager
    def _damaged(self) -> Iterator[None]:
        """A file SQLite cannot read (not a database, trashed pages) raises a
        :class:`CheckpointError` naming it; constraint and lock errors pass through, for
        the store to read."""
        try:
            yield
        except (sqlite3.IntegrityError, sqlite3.OperationalError):
            raise
        except sqlite3.DatabaseError as exc:
            raise CheckpointError(
                f"{self.where} cannot be read ({exc}): it is damaged or not a SQLite file; "
                "open another store, or restore this one from a backup"
            ) from exc

    def _open(self, busy_timeout: float, synchronous: str) -> None:
        """Switch to WAL and migrate. Many processes creating one file at once can meet
        SQLite's few "locked" answers that skip the busy handler (switching the journal
        mode is one): those are retried until ``busy_timeout``."""
        deadline = time.monotonic() + busy_timeout
        while True:
            try:
                self._conn.execute(f"PRAGMA busy_timeout={int(busy_timeout * 1000)}")
                self._conn.execute("PRAGMA foreign_keys=ON")
                self._conn.execute("PRAGMA journal_mode=WAL")
                self._conn.execute(f"PRAGMA synchronous={synchronous}")
                self._migrate()
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[Any]:
        with self._lock, self._damaged():
            cur = self._conn.cursor()
            cur.execute("BEGIN IMMEDIATE")
            try:
                yield cur
            except BaseException:
                cur.execute("ROLLBACK")
                raise
            cur.execute("COMMIT")

    @contextlib.contextmanager
    def _read(self) -> Iterator[Any]:
        with self._lock, self._damaged():
            cur = self._conn.cursor()
            cur.execute("BEGIN")
            try:
                yield cur
            finally:
                cur.execute("COMMIT")

    def _sql(self, query: str) -> str:
        return query

    def _table_exists(self, cur: Any, table: str) -> bool:
        cur.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,))
        return cur.fetchone() is not None

    def _is_duplicate(self, exc: BaseException) -> bool:
        return isinstance(exc, sqlite3.IntegrityError) and "UNIQUE" in str(exc)

    def _is_missing_run(self, exc: BaseException) -> bool:
        return isinstance(exc, sqlite3.IntegrityError) and "FOREIGN KEY" in str(exc)

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __repr__(self) -> str:
        return f"SQLiteCheckpointer({self.path!r})"
