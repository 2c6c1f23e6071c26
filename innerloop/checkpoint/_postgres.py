"""The store for several hosts: PostgreSQL through psycopg 3 (``pip install
'innerloop[postgres]'``).

Each write is one transaction at READ COMMITTED. Runs only ever insert rows under their
own key and update their own summary row, so concurrent runs never conflict (no
serialization failure to retry); a schema migration holds an advisory lock.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from typing import Any

from innerloop.checkpoint._sql import _COLUMNS, SQLStore, _checkpoint_row
from innerloop.checkpoint._types import CheckpointWrite

__all__ = ["PostgresCheckpointer"]

_SCHEMA_LOCK = 0x1E4E_C0DE  # pg_advisory_xact_lock key of innerloop's migrations


def _dumps(data: object) -> str:
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)


def _redacted(url: str) -> str:
    """``url`` without its password (for messages)."""
    head, sep, tail = url.rpartition("@")
    if not sep or ":" not in head.split("//", 1)[-1]:
        return url
    scheme, _, userinfo = head.partition("//")
    user = userinfo.split(":", 1)[0]
    return f"{scheme}//{user}:***@{tail}"


_CHECKPOINT_TYPES = (
    "seq integer, state text, source text, guard text, history_start integer, "
    "history_len integer, created float8, base integer, data text, status text, "
    "exit_reason text, turns integer, cost_usd float8"
)
_WRITE = (
    "WITH m AS (INSERT INTO innerloop_messages (run_id, idx, data) SELECT %(run)s, idx, data "
    "FROM json_to_recordset(%(messages)s::json) AS x(idx integer, data text)) "
    f"INSERT INTO innerloop_checkpoints ({_COLUMNS}) SELECT %(run)s, "
    f"{_COLUMNS.removeprefix('run_id, ')} "
    f"FROM json_to_recordset(%(checkpoints)s::json) AS x({_CHECKPOINT_TYPES})"
)
"""Every message and checkpoint of a group in one statement: one round trip, atomic by
itself (a statement in autocommit mode is its own transaction), and the same text every
time, prepared on a connection's first write (psycopg would wait for the fifth, and a
short run makes only a few: one per barrier). The rows travel
as two JSON texts (``json.dumps`` in C): psycopg's text-array dumper escapes each
element with a regular expression in Python, which cost more than the round trip."""

_NAMES = tuple(_COLUMNS.split(", "))[1:]


class PostgresCheckpointer(SQLStore):
    """Checkpoints in the PostgreSQL database at ``url`` (``postgresql://user@host/db``).
    The tables are created (or migrated) on first use.

    A run's commits are made in a worker thread (``commit_off_loop``): the run waits for
    each, as it must, but the event loop serves the other runs during the round trip. A
    SQLite commit is local and about as quick as the hop to a thread, so that store
    commits on the loop."""

    commit_off_loop = True

    def __init__(self, url: str, *, connect_timeout: float = 10.0) -> None:
        try:
            import psycopg
        except ImportError as exc:  # pragma: no cover - the extra is part of dev
            raise ImportError(
                "the PostgreSQL checkpoint store needs psycopg 3: pip install 'innerloop[postgres]'"
            ) from exc
        super().__init__()
        self._psycopg = psycopg
        self.where = f"PostgreSQL database {_redacted(url)}"
        self._conn = psycopg.connect(url, autocommit=True, connect_timeout=int(connect_timeout))
        try:
            self._migrate()
        except BaseException:
            self._conn.close()
            raise

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[Any]:
        with self._lock, self._conn.transaction(), self._conn.cursor() as cur:
            yield cur

    _read = _transaction

    def write(self, checkpoints: Sequence[CheckpointWrite]) -> None:
        """One statement for the whole group, so one round trip and one commit."""
        if not checkpoints:
            return
        first = checkpoints[0].info
        rows = [dict(zip(_NAMES, _checkpoint_row(c)[1:], strict=True)) for c in checkpoints]
        messages = [{"idx": i, "data": text} for c in checkpoints for i, text in c.messages]
        params = {"run": first.run_id, "messages": _dumps(messages), "checkpoints": _dumps(rows)}
        try:
            with self._lock, self._conn.cursor() as cur:
                cur.execute(_WRITE, params, prepare=True)
        except Exception as exc:
            self._write_failed(exc, first)
            raise

    _octets = "octet_length(data)"

    def _sql(self, query: str) -> str:
        return query.replace("?", "%s")

    def _migrate(self) -> None:
        # a session lock taken before the transaction starts: one taken inside it would
        # leave that transaction reading the catalog as it was before the wait
        self._conn.execute("SELECT pg_advisory_lock(%s)", (_SCHEMA_LOCK,))
        try:
            super()._migrate()
        finally:
            self._conn.execute("SELECT pg_advisory_unlock(%s)", (_SCHEMA_LOCK,))

    def _table_exists(self, cur: Any, table: str) -> bool:
        cur.execute("SELECT to_regclass(%s) IS NOT NULL", (table,))
        return bool(cur.fetchone()[0])

    def _is_duplicate(self, exc: BaseException) -> bool:
        return isinstance(exc, self._psycopg.errors.UniqueViolation)

    def _is_missing_run(self, exc: BaseException) -> bool:
        return isinstance(exc, self._psycopg.errors.ForeignKeyViolation)

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __repr__(self) -> str:
        return f"PostgresCheckpointer({self.where!r})"
