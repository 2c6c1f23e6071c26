"""Picking a store from a URL, and where a run read back from a checkpoint goes on."""

from __future__ import annotations

from pathlib import Path

from innerloop.checkpoint._memory import MemoryCheckpointer
from innerloop.checkpoint._postgres import PostgresCheckpointer
from innerloop.checkpoint._sqlite import SQLiteCheckpointer
from innerloop.checkpoint._types import Checkpointer

__all__ = ["open_checkpointer", "resume_point"]

RESTART_AT = {"stream": "call"}
"""States that need a live object of the driver (the open stream): a run checkpointed on
entering one goes on from the state named here (the model call is made again; its answer
had not been booked)."""


def open_checkpointer(url: str | Path) -> Checkpointer:
    """A store from a URL: ``sqlite:///runs.db`` (or a plain path), ``postgresql://...``
    (``postgres://`` too) or ``memory:``."""
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


def resume_point(state: str) -> str:
    """The state a run checkpointed on entering ``state`` goes on from."""
    return RESTART_AT.get(state, state)
