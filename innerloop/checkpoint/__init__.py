"""Checkpoints: save a run at the transitions you choose, resume it, fork it.

    harness = Harness(params, providers, checkpointer="sqlite:///runs.db")
    run = harness.start("Clean up the repo")       # checkpointed at every transition
    ...                                            # crash, or the run ends suspended
    state = await harness.resume(run_id, answer=True).run()
    child = harness.fork(run_id, at=3, edit=lambda s: ...)

Stores: :class:`SQLiteCheckpointer` (a file; the default), :class:`PostgresCheckpointer`
(psycopg 3) and :class:`MemoryCheckpointer` (tests); :func:`open_checkpointer` picks one
from a URL. Each implements :class:`Checkpointer`.
"""

from typing import TYPE_CHECKING

from innerloop._lazy import lazy_names
from innerloop.checkpoint._open import driver_errors, open_checkpointer, resume_point, store_errors
from innerloop.checkpoint._types import (
    SCHEMA_VERSION,
    Checkpoint,
    CheckpointCorrupt,
    Checkpointer,
    CheckpointError,
    CheckpointInfo,
    CheckpointSchemaError,
    CheckpointWrite,
    RunInfo,
    RunStatus,
    StoredRows,
    UnknownRunError,
)
from innerloop.checkpoint._writer import (
    DEFERRED_PHASES,
    CheckpointCommit,
    CheckpointEvery,
    CheckpointWriter,
    decode,
)

if TYPE_CHECKING:
    from innerloop.checkpoint._memory import MemoryCheckpointer
    from innerloop.checkpoint._postgres import PostgresCheckpointer
    from innerloop.checkpoint._sql import MIGRATIONS
    from innerloop.checkpoint._sqlite import SQLiteCheckpointer

__getattr__ = lazy_names(
    __name__,
    {
        "MIGRATIONS": "innerloop.checkpoint._sql",
        "MemoryCheckpointer": "innerloop.checkpoint._memory",
        "PostgresCheckpointer": "innerloop.checkpoint._postgres",
        "SQLiteCheckpointer": "innerloop.checkpoint._sqlite",
    },
)
"""The stores, imported when first named (``import innerloop`` does not load sqlite3)."""

__all__ = [
    "DEFERRED_PHASES",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "Checkpoint",
    "CheckpointCommit",
    "CheckpointCorrupt",
    "CheckpointError",
    "CheckpointEvery",
    "CheckpointInfo",
    "CheckpointSchemaError",
    "CheckpointWrite",
    "CheckpointWriter",
    "Checkpointer",
    "MemoryCheckpointer",
    "PostgresCheckpointer",
    "RunInfo",
    "RunStatus",
    "SQLiteCheckpointer",
    "StoredRows",
    "UnknownRunError",
    "decode",
    "driver_errors",
    "open_checkpointer",
    "resume_point",
    "store_errors",
]
