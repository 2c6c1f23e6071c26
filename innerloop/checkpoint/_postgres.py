"""The store for several hosts: PostgreSQL through psycopg 3 (``pip install
'innerloop[postgres]'``).

Each write is one transaction at READ COMMITTED. Runs only ever insert rows under their
own key and update their own summary row, so concurrent runs never conflict (no
serialization failure to retry); a schema migration holds an advisory lock.

A run's commits go through an asynchronous connection (psycopg's ``AsyncConnection``), one
per event loop: the run awaits its commit and the loop serves other runs during the round
trip, with no hop to a thread. Reads, migrations and the synchronous callers (``start``,
``fork``, listing runs, the command line) use the store's synchronous connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from innerloop._loopend import close_at_loop_end
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

    A run commits through :meth:`awrite`: on an asynchronous connection of the run's event
    loop, opened at its first commit and closed when that loop ends (or by :meth:`close`).
    The run waits for each commit, as it must, but the event loop serves the other runs
    during the round trip, and no thread is involved. Runs on one loop share its
    connection: psycopg serializes its statements (a lock per connection), as the
    synchronous connection's lock does for :meth:`write`.

    Measured by ``python bench/checkpoint.py --repeat 5 --long 0`` (50 turns, a tool call
    each, every transition checkpointed, a throwaway local server): 0.80 to 1.09 ms of
    checkpointing a turn (two commits), 0.21x to 0.23x LangGraph's ``PostgresSaver``;
    committing in a worker thread instead measured 1.07 to 1.32 ms (0.21x to 0.31x) in
    the same interleaved runs: the hop to the thread cost about what the round trip
    does. An asynchronous statement costs about 25 us more than a synchronous one
    (``SELECT 1``: psycopg waits on the loop), and the first commit on a loop opens its
    connection (4 to 8 ms here): :meth:`aconnect` opens it ahead.

    Each store holds two connections while a run commits: the synchronous one and its
    loop's (one more per further loop, as with ``run_sync`` calls in several threads)."""

    def __init__(self, url: str, *, connect_timeout: float = 10.0) -> None:
        try:
            import psycopg
        except ImportError as exc:  # pragma: no cover - the extra is part of dev
            raise ImportError(
                "the PostgreSQL checkpoint store needs psycopg 3: pip install 'innerloop[postgres]'"
            ) from exc
        super().__init__()
        self._psycopg = psycopg
        self._url = url
        self._timeout = int(connect_timeout)
        self.where = f"PostgreSQL database {_redacted(url)}"
        self._loops: dict[
            asyncio.AbstractEventLoop, tuple[asyncio.Task[Any], asyncio.Task[None]]
        ] = {}
        """Each event loop's asynchronous connection (the task that opens it) and the task
        that closes it at the loop's end."""
        self._loops_lock = threading.Lock()
        self._conn = psycopg.connect(url, autocommit=True, connect_timeout=self._timeout)
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

    def _params(self, checkpoints: Sequence[CheckpointWrite]) -> dict[str, str]:
        rows = [dict(zip(_NAMES, _checkpoint_row(c)[1:], strict=True)) for c in checkpoints]
        messages = [{"idx": i, "data": text} for c in checkpoints for i, text in c.messages]
        run = checkpoints[0].info.run_id
        return {"run": run, "messages": _dumps(messages), "checkpoints": _dumps(rows)}

    def write(self, checkpoints: Sequence[CheckpointWrite]) -> None:
        """One statement for the whole group, so one round trip and one commit."""
        if not checkpoints:
            return
        params = self._params(checkpoints)
        try:
            with self._lock, self._conn.cursor() as cur:
                cur.execute(_WRITE, params, prepare=True)
        except Exception as exc:
            self._write_failed(exc, checkpoints[0].info)
            raise

    async def awrite(self, checkpoints: Sequence[CheckpointWrite]) -> None:
        """:meth:`write` on the running loop's asynchronous connection: the loop is free
        during the round trip."""
        if not checkpoints:
            return
        params = self._params(checkpoints)
        try:
            cur = await self._connection()
            await cur.execute(_WRITE, params, prepare=True)
        except Exception as exc:
            self._write_failed(exc, checkpoints[0].info)
            raise

    async def aconnect(self) -> None:
        """Open the running loop's connection now (a host may, when its loop starts), not
        at the first commit of a run on it: a connection costs the server a new backend
        process, 4 to 8 ms on a local server here."""
        await self._connection()

    async def _connection(self) -> Any:
        """A cursor on the running loop's connection, opened by its first caller (the
        others wait for it); a new one when it was closed (a broken connection). Runs
        share the cursor: nothing is fetched from it, and the connection's lock takes the
        statements one at a time (a cursor made per write cost 15 to 20 us more)."""
        loop = asyncio.get_running_loop()
        entry = self._loops.get(loop)
        if entry is None or (entry[0].done() and _broken(entry[0])):
            # the loop keeps only a weak reference to a task: the store keeps both, until
            # the loop's end
            ends = (
                close_at_loop_end(self, functools.partial(self._loop_ended, loop))
                if entry is None
                else entry[1]
            )
            entry = (loop.create_task(self._open()), ends)
            with self._loops_lock:
                self._loops[loop] = entry
        opening = entry[0]
        # shielded: a caller cancelled while waiting leaves the connection to the others
        return await asyncio.shield(opening)

    async def _open(self) -> Any:
        conn = await self._psycopg.AsyncConnection.connect(
            self._url, autocommit=True, connect_timeout=self._timeout
        )
        return conn.cursor()

    async def _loop_ended(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._loops_lock:
            entry = self._loops.pop(loop, None)
        if entry is not None:
            opening = entry[0]
            if not opening.done():
                opening.cancel()
            with contextlib.suppress(Exception, asyncio.CancelledError):  # none was opened
                cur = await opening
                await cur.connection.close()

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
        """Close the synchronous connection and every loop's asynchronous one."""
        with self._loops_lock:
            entries = list(self._loops.values())  # each loop's end drops its own
        for opening, _ in entries:
            _close(opening)
        with self._lock:
            self._conn.close()

    def __repr__(self) -> str:
        return f"PostgresCheckpointer({self.where!r})"


def _broken(opening: asyncio.Task[Any]) -> bool:
    """Did opening the connection fail, or was it closed since (psycopg closes one it
    cannot trust any more)?"""
    return (
        opening.cancelled() or opening.exception() is not None or opening.result().connection.closed
    )


def _close(opening: asyncio.Task[Any]) -> None:
    """Close an opened asynchronous connection from any thread, its loop running or not:
    ``AsyncConnection.close()`` awaits nothing (it ends the libpq connection, a local
    call), so its libpq connection is ended here directly."""
    if opening.done() and not opening.cancelled() and opening.exception() is None:
        opening.result().connection.pgconn.finish()
