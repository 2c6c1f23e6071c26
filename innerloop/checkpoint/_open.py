"""Picking a store from a URL, and where a run read back from a checkpoint goes on."""

from __future__ import annotations

import sys
from pathlib import Path

from innerloop.checkpoint._types import Checkpointer, CheckpointError
from innerloop.fsm._driver import resume_point

__all__ = ["driver_errors", "open_checkpointer", "resume_point", "store_errors"]


def open_checkpointer(url: str | Path) -> Checkpointer:
    """A store from a URL: ``sqlite:///runs.db`` (or a plain path), ``postgresql://...``
    (``postgres://`` too) or ``memory:``."""
    # the stores (and sqlite3) load when a run first asks for one: `import innerloop` does
    # not load them
    from innerloop.checkpoint._memory import MemoryCheckpointer
    from innerloop.checkpoint._postgres import PostgresCheckpointer
    from innerloop.checkpoint._sqlite import SQLiteCheckpointer

    text = str(url)
    if text == "memory:":
        return MemoryCheckpointer()
    if text.startswith(("postgresql://", "postgres://")):
        return PostgresCheckpointer(text)
    if text.startswith("sqlite:///"):
        return SQLiteCheckpointer(text.removeprefix("sqlite:///"))
    if "://" in text:
        raise ValueError(
            f"unknown checkpoint store URL {text!r}; use sqlite:///path/runs.db, "
            "postgresql://user@host/db or memory:"
        )
    return SQLiteCheckpointer(text)


def driver_errors() -> tuple[type[Exception], ...]:
    """The database drivers' own error types (``sqlite3.Error`` and ``psycopg.Error``, each
    once its driver is imported: one not imported has raised nothing): what a store may
    still raise, besides :class:`~innerloop.checkpoint.CheckpointError`, on a store it
    cannot use."""
    errors: tuple[type[Exception], ...] = ()
    for driver in ("sqlite3", "psycopg"):
        error = getattr(sys.modules.get(driver), "Error", None)
        if isinstance(error, type) and issubclass(error, Exception):
            errors += (error,)
    return errors


def store_errors() -> tuple[type[Exception], ...]:
    """What opening or reading a store that cannot be used may raise: a
    :class:`~innerloop.checkpoint.CheckpointError`, a ``ValueError`` (a bad URL), an
    ``OSError``, or one of :func:`driver_errors`."""
    return (CheckpointError, ValueError, OSError, *driver_errors())
