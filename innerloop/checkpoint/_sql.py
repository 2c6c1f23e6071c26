"""The SQL both stores share (SQLite and PostgreSQL): schema, migrations, queries.

Tables (prefixed ``innerloop_`` so they can live in an application's database):

- ``meta``: ``schema_version``.
- ``runs``: one summary row per run (the only row ever updated).
- ``messages``: ``(run_id, idx) -> JSON``, append-only: each message is written once.
- ``checkpoints``: ``(run_id, seq) -> state JSON`` without history, plus the range of
  messages (``history_start``, ``history_len``) that is its history. Append-only.
- ``answers``: ``(run_id, interrupt_id)``, one row per suspension answered: the row is
  the atomic claim that lets one resume, of any number racing, go on.

A store opened on an older schema runs the missing :data:`MIGRATIONS` in one
transaction; a newer one is refused and left alone.
"""

from __future__ import annotations

import abc
import contextlib
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any, NoReturn

from innerloop.checkpoint._types import (
    SCHEMA_VERSION,
    CheckpointError,
    CheckpointInfo,
    CheckpointSchemaError,
    CheckpointWrite,
    MachineRecord,
    RunInfo,
    StoredRows,
    UnknownRunError,
    check_run_id,
)

__all__ = ["MIGRATIONS", "SQLStore"]

_V1 = (
    "CREATE TABLE innerloop_runs (run_id TEXT PRIMARY KEY, machine TEXT NOT NULL, "
    "parent_run_id TEXT, parent_seq INTEGER, created DOUBLE PRECISION NOT NULL)",
    "CREATE TABLE innerloop_messages (run_id TEXT NOT NULL, idx INTEGER NOT NULL, "
    "data TEXT NOT NULL, PRIMARY KEY (run_id, idx))",
    "CREATE TABLE innerloop_checkpoints (run_id TEXT NOT NULL, seq INTEGER NOT NULL, "
    "state TEXT NOT NULL, source TEXT, guard TEXT, history_start INTEGER NOT NULL, "
    "history_len INTEGER NOT NULL, base INTEGER NOT NULL, data TEXT NOT NULL, "
    "created DOUBLE PRECISION NOT NULL, status TEXT NOT NULL, exit_reason TEXT, "
    "turns INTEGER NOT NULL, cost_usd DOUBLE PRECISION, PRIMARY KEY (run_id, seq), "
    "FOREIGN KEY (run_id) REFERENCES innerloop_runs (run_id))",
)

_V2 = tuple(
    f"ALTER TABLE innerloop_runs ADD COLUMN {column} TEXT"
    for column in ("machine_fingerprint", "machine_import_path", "machine_signature")
)
"""Version 2: what a run records of its machine (fingerprint, import path, signature)."""

_V3 = (
    "CREATE TABLE innerloop_answers (run_id TEXT NOT NULL, interrupt_id TEXT NOT NULL, "
    "created DOUBLE PRECISION NOT NULL, PRIMARY KEY (run_id, interrupt_id), "
    "FOREIGN KEY (run_id) REFERENCES innerloop_runs (run_id))",
)
"""Version 3: the suspensions answered, one row each (a second answer is refused)."""

MIGRATIONS: tuple[tuple[int, tuple[str, ...]], ...] = ((1, _V1), (2, _V2), (3, _V3))
"""``(version, statements)`` in order: what takes a store from the version before to
``version``. A new schema adds an entry (and raises ``SCHEMA_VERSION``); never edit one."""

_INFO = "run_id, seq, state, source, guard, history_start, history_len, created"
_RUNS = (
    "SELECT r.run_id, r.machine, COALESCE(c.status, 'running'), c.exit_reason, "
    "COALESCE(c.state, ''), COALESCE(c.turns, 0), c.cost_usd, COALESCE(c.seq, 0), "
    "r.parent_run_id, r.parent_seq, r.created, COALESCE(c.created, r.created) AS updated, "
    "r.machine_fingerprint, r.machine_import_path "
    "FROM innerloop_runs r LEFT JOIN innerloop_checkpoints c ON c.run_id = r.run_id AND "
    "c.seq = (SELECT MAX(seq) FROM innerloop_checkpoints m WHERE m.run_id = r.run_id) "
    "ORDER BY updated DESC, r.run_id"
)
"""The runs with the summary of their latest checkpoint (a write touches no run row)."""

_COLUMNS = f"{_INFO}, base, data, status, exit_reason, turns, cost_usd"
_INSERT_CHECKPOINT = (
    f"INSERT INTO innerloop_checkpoints ({_COLUMNS}) VALUES "
    "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def _checkpoint_row(checkpoint: CheckpointWrite) -> tuple[Any, ...]:
    i = checkpoint.info
    return (
        *(i.run_id, i.seq, i.state, i.source, i.guard, i.history_start, i.history_len),
        *(i.created, checkpoint.base, checkpoint.data, checkpoint.status),
        *(checkpoint.exit_reason, checkpoint.turns, checkpoint.cost_usd),
    )


class SQLStore(abc.ABC):
    """A :class:`~innerloop.checkpoint.Checkpointer` on a DB-API connection. Thread-safe
    (one connection, a lock); each process opens its own store."""

    where: str
    migrations: Sequence[tuple[int, Sequence[str]]] = MIGRATIONS
    version: int = SCHEMA_VERSION

    def __init__(self) -> None:
        self._lock = threading.Lock()

    # -- what a dialect provides ----------------------------------------------------------

    @abc.abstractmethod
    def _transaction(self) -> contextlib.AbstractContextManager[Any]:
        """A write transaction (serialized against other writers); yields a cursor."""

    @abc.abstractmethod
    def _read(self) -> contextlib.AbstractContextManager[Any]:
        """A read-only snapshot; yields a cursor."""

    @abc.abstractmethod
    def _sql(self, query: str) -> str:
        """``query`` (written with ``?`` placeholders) in the driver's style."""

    @abc.abstractmethod
    def _table_exists(self, cur: Any, table: str) -> bool: ...

    @abc.abstractmethod
    def _is_duplicate(self, exc: BaseException) -> bool: ...

    @abc.abstractmethod
    def _is_missing_run(self, exc: BaseException) -> bool:
        """A foreign key violation: a checkpoint for a run that was never created."""

    def _lock_schema(self, cur: Any) -> None:  # noqa: B027 (optional: most need none)
        """Keep other processes out of the migration (a write transaction may not)."""

    _octets = "LENGTH(CAST(data AS BLOB))"

    # -- schema ---------------------------------------------------------------------------

    def _found_version(self, cur: Any) -> int:
        if not self._table_exists(cur, "innerloop_meta"):
            return 0
        cur.execute(
            self._sql("SELECT value FROM innerloop_meta WHERE key = ?"), ("schema_version",)
        )
        row = cur.fetchone()
        try:
            return int(row[0]) if row else 0
        except (TypeError, ValueError):
            raise CheckpointError(
                f"{self.where} has checkpoint schema version {row[0]!r}, not a number: the "
                "store is damaged or not innerloop's; open another, or restore it from a backup"
            ) from None

    def _migrate(self) -> None:
        """Bring the schema to ``self.version``; refuse a newer one, writing nothing."""
        with self._read() as cur:
            found = self._found_version(cur)
        if found > self.version:
            raise CheckpointSchemaError(found, self.version, self.where)
        if found == self.version:
            return
        with self._transaction() as cur:
            self._lock_schema(cur)
            found = self._found_version(cur)  # another process may have done it meanwhile
            if found > self.version:
                raise CheckpointSchemaError(found, self.version, self.where)
            if found == 0:
                cur.execute(
                    "CREATE TABLE innerloop_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
                )
                cur.execute(
                    self._sql("INSERT INTO innerloop_meta (key, value) VALUES (?, ?)"),
                    ("schema_version", "0"),
                )
            for version, statements in self.migrations:
                if found < version <= self.version:
                    for statement in statements:
                        cur.execute(statement)
            cur.execute(
                self._sql("UPDATE innerloop_meta SET value = ? WHERE key = ?"),
                (str(self.version), "schema_version"),
            )

    # -- the protocol ---------------------------------------------------------------------

    def create_run(
        self,
        run_id: str,
        machine: str,
        *,
        parent_run_id: str | None = None,
        parent_seq: int | None = None,
        record: MachineRecord | None = None,
        now: float | None = None,
    ) -> None:
        check_run_id(run_id)
        at = time.time() if now is None else now
        known = record.columns() if record is not None else (None, None, None)
        try:
            with self._transaction() as cur:
                cur.execute(
                    self._sql(
                        "INSERT INTO innerloop_runs (run_id, machine, parent_run_id, "
                        "parent_seq, created, machine_fingerprint, machine_import_path, "
                        "machine_signature) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
                    ),
                    (run_id, machine, parent_run_id, parent_seq, at, *known),
                )
        except Exception as exc:
            if self._is_duplicate(exc):
                raise CheckpointError(
                    f"a run {run_id!r} is already in {self.where}; pick another run id"
                ) from exc
            raise

    def write(self, checkpoints: Sequence[CheckpointWrite]) -> None:
        if not checkpoints:
            return
        try:
            with self._transaction() as cur:
                messages = [(c.info.run_id, i, text) for c in checkpoints for i, text in c.messages]
                if messages:
                    cur.executemany(
                        self._sql(
                            "INSERT INTO innerloop_messages (run_id, idx, data) VALUES (?, ?, ?)"
                        ),
                        messages,
                    )
                cur.executemany(
                    self._sql(_INSERT_CHECKPOINT), [_checkpoint_row(c) for c in checkpoints]
                )
        except Exception as exc:
            self._write_failed(exc, checkpoints[0].info)
            raise

    def _write_failed(self, exc: BaseException, info: CheckpointInfo) -> None:
        """Raise the error that says what went wrong, if it is one of ours."""
        if self._is_missing_run(exc):
            raise UnknownRunError(info.run_id) from exc
        if self._is_duplicate(exc):
            raise CheckpointError(
                f"checkpoint {info.seq} of run {info.run_id!r} is already in {self.where}: "
                "another process is writing this run; nothing was overwritten"
            ) from exc

    def claim(self, run_id: str, interrupt_id: str, *, now: float | None = None) -> bool:
        try:
            with self._transaction() as cur:
                cur.execute(
                    self._sql(
                        "INSERT INTO innerloop_answers (run_id, interrupt_id, created) "
                        "VALUES (?, ?, ?)"
                    ),
                    (run_id, interrupt_id, time.time() if now is None else now),
                )
        except Exception as exc:
            if self._is_duplicate(exc):
                return False
            if self._is_missing_run(exc):
                raise UnknownRunError(run_id) from exc
            raise
        return True

    def rows(self, run_id: str, seq: int | None = None) -> StoredRows:
        check_run_id(run_id)
        with self._read() as cur:
            if seq is None:
                cur.execute(
                    self._sql(
                        f"SELECT {_INFO}, base FROM innerloop_checkpoints WHERE run_id = ? "
                        "ORDER BY seq DESC LIMIT 1"
                    ),
                    (run_id,),
                )
            else:
                cur.execute(
                    self._sql(
                        f"SELECT {_INFO}, base FROM innerloop_checkpoints "
                        "WHERE run_id = ? AND seq = ?"
                    ),
                    (run_id, seq),
                )
            row = cur.fetchone()
            if row is None:
                self._missing(cur, run_id, seq)
            info = CheckpointInfo(*row[:8])
            cur.execute(
                self._sql(
                    "SELECT seq, data FROM innerloop_checkpoints WHERE run_id = ? "
                    "AND seq >= ? AND seq <= ? ORDER BY seq"
                ),
                (run_id, row[8], info.seq),
            )
            chain = [(int(r[0]), r[1]) for r in cur.fetchall()]
            cur.execute(
                self._sql(
                    "SELECT data FROM innerloop_messages WHERE run_id = ? AND idx >= ? AND idx < ? "
                    "ORDER BY idx"
                ),
                (run_id, info.history_start, info.history_start + info.history_len),
            )
            messages = [r[0] for r in cur.fetchall()]
        return StoredRows(info, chain, messages)

    def _missing(self, cur: Any, run_id: str, seq: int | None) -> NoReturn:
        cur.execute(self._sql("SELECT 1 FROM innerloop_runs WHERE run_id = ?"), (run_id,))
        if cur.fetchone() is None:
            raise UnknownRunError(run_id)
        cur.execute(
            self._sql("SELECT COALESCE(MAX(seq), 0) FROM innerloop_checkpoints WHERE run_id = ?"),
            (run_id,),
        )
        raise UnknownRunError(run_id, seq, int(cur.fetchone()[0]))

    def checkpoints(self, run_id: str) -> list[CheckpointInfo]:
        check_run_id(run_id)
        with self._read() as cur:
            cur.execute(
                self._sql(
                    f"SELECT {_INFO} FROM innerloop_checkpoints WHERE run_id = ? ORDER BY seq"
                ),
                (run_id,),
            )
            found = [CheckpointInfo(*r) for r in cur.fetchall()]
            if not found:
                cur.execute(self._sql("SELECT 1 FROM innerloop_runs WHERE run_id = ?"), (run_id,))
                if cur.fetchone() is None:
                    raise UnknownRunError(run_id)
        return found

    def runs(self) -> list[RunInfo]:
        with self._read() as cur:
            cur.execute(_RUNS)
            return [RunInfo(*r) for r in cur.fetchall()]

    def machine(self, run_id: str) -> MachineRecord | None:
        check_run_id(run_id)
        with self._read() as cur:
            cur.execute(
                self._sql(
                    "SELECT machine, machine_fingerprint, machine_import_path, "
                    "machine_signature FROM innerloop_runs WHERE run_id = ?"
                ),
                (run_id,),
            )
            row = cur.fetchone()
        if row is None:
            raise UnknownRunError(run_id)
        return MachineRecord.from_columns(*row)

    def stored_bytes(self) -> int:
        with self._read() as cur:
            total = 0
            for table in ("innerloop_messages", "innerloop_checkpoints"):
                cur.execute(f"SELECT COALESCE(SUM({self._octets}), 0) FROM {table}")
                total += int(cur.fetchone()[0])
        return total

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with self._lock:
            yield
