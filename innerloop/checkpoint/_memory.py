"""A store in memory, for tests: the same rows as the SQL stores, in a SQLite database
that lives in this process only."""

from __future__ import annotations

from innerloop.checkpoint._sqlite import SQLiteCheckpointer

__all__ = ["MemoryCheckpointer"]


class MemoryCheckpointer(SQLiteCheckpointer):
    """Checkpoints kept in memory; gone with the process. Same behaviour as the file
    store (it is SQLite's in-memory database), so a test of one holds for the other."""

    def __init__(self) -> None:
        super().__init__(":memory:")
        self.where = "the in-memory store"

    def __repr__(self) -> str:
        return "MemoryCheckpointer()"
