"""What a checkpoint store holds and the protocol every store implements.

A store keeps three things per run: the run's summary (a row that changes), its messages
(append-only, each written once) and its checkpoints (append-only). A checkpoint is the
run's :class:`~innerloop.HarnessState` at a transition, without its history: it names a
range of the run's stored messages instead (``history_start``, ``history_len``). So a run
of n messages stores each message once, whatever the number of checkpoints, and storage
grows with the new messages only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Generic, Literal, Protocol

import attrs

from innerloop._errors import InnerloopError
from innerloop.fsm._locate import MachineRecord
from innerloop.fsm._output import OutputT
from innerloop.fsm._state import HarnessState

__all__ = [
    "SCHEMA_VERSION",
    "Checkpoint",
    "CheckpointCorrupt",
    "CheckpointError",
    "CheckpointInfo",
    "CheckpointSchemaError",
    "CheckpointWrite",
    "Checkpointer",
    "MachineRecord",
    "RunInfo",
    "RunStatus",
    "StoredRows",
    "UnknownRunError",
    "check_run_id",
]

SCHEMA_VERSION = 3
"""The schema this innerloop writes. A store with an older one is migrated when opened;
a newer one is refused (:class:`CheckpointSchemaError`)."""

RunStatus = Literal["running", "suspended", "finished"]


class CheckpointError(InnerloopError):
    """A checkpoint store cannot do what was asked; nothing was written."""


def check_run_id(run_id: object, what: str = "run id", fix: str = "") -> str:
    """``run_id``, when every store can keep it: a non-empty string without NUL
    characters (PostgreSQL's text cannot hold one); else :class:`CheckpointError` (its
    message ends with ``fix``, when given)."""
    if not isinstance(run_id, str) or not run_id:
        raise CheckpointError(f"a {what} is a non-empty string, got {run_id!r}{fix}")
    if "\x00" in run_id:
        raise CheckpointError(
            f"a {what} cannot hold a NUL character (\\x00), which PostgreSQL cannot store; "
            f"got {run_id!r}{fix}"
        )
    return run_id


class CheckpointSchemaError(CheckpointError):
    """The store was written by a newer innerloop (its schema version is higher)."""

    def __init__(self, found: int, supported: int, where: str) -> None:
        self.found = found
        self.supported = supported
        super().__init__(
            f"{where} has checkpoint schema version {found}, newer than the {supported} this "
            "innerloop reads; upgrade innerloop (the store was left as it is)"
        )


class CheckpointCorrupt(CheckpointError, ValueError):
    """A stored checkpoint (or a message it names) cannot be read back."""

    def __init__(self, run_id: str, seq: int, reason: str) -> None:
        self.run_id = run_id
        self.seq = seq
        self.reason = reason
        hint = f"; fork from an earlier checkpoint (at={seq - 1})" if seq > 1 else ""
        super().__init__(
            f"checkpoint {seq} of run {run_id!r} cannot be read: {reason}; the row was left "
            f"as it is{hint}"
        )


class UnknownRunError(CheckpointError, LookupError):
    """No run (or no checkpoint) with that id in the store."""

    def __init__(self, run_id: str, seq: int | None = None, count: int = 0) -> None:
        self.run_id = run_id
        self.seq = seq
        if seq is None and count == 0:
            message = (
                f"no run {run_id!r} in the checkpoint store; `innerloop runs list --db URL` "
                "(or harness.runs()) lists the runs it holds"
            )
        elif seq is None:
            message = f"run {run_id!r} has no checkpoint yet"
        else:
            message = (
                f"run {run_id!r} has no checkpoint {seq}; its checkpoints are 1 to {count} "
                f"(`innerloop runs show {run_id} --db URL` lists them)"
            )
        super().__init__(message)


@attrs.frozen
class CheckpointInfo:
    """One checkpoint: the run entered ``state`` by ``source -> state [guard]``."""

    run_id: str
    seq: int
    """1, 2, 3, ... within the run; what ``fork(at=...)`` takes."""
    state: str
    source: str | None
    guard: str | None
    history_start: int
    history_len: int
    created: float


@attrs.frozen(eq=False)
class Checkpoint(Generic[OutputT]):
    """A checkpoint read back: its info and the run's state then (history included)."""

    info: CheckpointInfo
    state: HarnessState[OutputT]


@attrs.frozen
class RunInfo:
    """A run's summary, as ``harness.runs()`` and ``innerloop runs list`` show it."""

    run_id: str
    machine: str
    status: RunStatus
    exit_reason: str | None
    state: str
    """The state of its latest checkpoint."""
    turns: int
    cost_usd: float | None
    checkpoints: int
    parent_run_id: str | None
    parent_seq: int | None
    created: float
    updated: float
    fingerprint: str | None = None
    """The fingerprint of its machine (None for a run stored before runs recorded it)."""
    import_path: str | None = None
    """Where its machine's spec can be imported from, when the spec said."""


@attrs.frozen
class CheckpointWrite:
    """One checkpoint to write, with the messages it adds (JSON text, by index)."""

    info: CheckpointInfo
    data: str
    """The state without its history, as JSON text: whole (``{"full": ...}``) or as what
    changed since the checkpoint before (``{"set": ..., "append": ...}``)."""
    base: int
    """The whole checkpoint this one builds on (its own ``seq`` when it is whole)."""
    messages: Sequence[tuple[int, str]]
    status: RunStatus
    exit_reason: str | None
    turns: int
    cost_usd: float | None


@attrs.frozen
class StoredRows:
    """A checkpoint's raw rows, before decoding."""

    info: CheckpointInfo
    data: Sequence[tuple[int, str]]
    """``(seq, data)`` from its whole base checkpoint up to it, in order."""
    messages: Sequence[str]


class Checkpointer(Protocol):
    """A checkpoint store. Every write is one transaction: a checkpoint is either wholly
    there or not at all, and a reader never sees half of one. Nothing is ever updated in
    place.

    A store may also have ``async def awrite(checkpoints)``, :meth:`write` without
    holding the event loop (:class:`~innerloop.checkpoint.PostgresCheckpointer` has one):
    a run's :class:`~innerloop.checkpoint.CheckpointWriter` then commits through it, and
    the loop serves other runs while the commit waits for the database."""

    def create_run(
        self,
        run_id: str,
        machine: str,
        *,
        parent_run_id: str | None = None,
        parent_seq: int | None = None,
        record: MachineRecord | None = None,
    ) -> None:
        """Record a new run (and what ``record`` says of its machine);
        :class:`CheckpointError` if the id is taken."""

    def write(self, checkpoints: Sequence[CheckpointWrite]) -> None:
        """Add the checkpoints of one run (consecutive, in order) and the messages they
        add, in one transaction: all of them are there afterwards, or none."""

    def claim(self, run_id: str, interrupt_id: str) -> bool:
        """Record that the suspension ``interrupt_id`` of the run is being answered; False
        when it already was (by this process or another). Atomic: of any number of
        claims of one suspension, exactly one returns True."""

    def rows(self, run_id: str, seq: int | None = None) -> StoredRows:
        """The raw rows of checkpoint ``seq`` (the latest when None);
        :class:`UnknownRunError` when there is none."""

    def checkpoints(self, run_id: str) -> list[CheckpointInfo]:
        """Every checkpoint of the run, oldest first."""

    def runs(self) -> list[RunInfo]:
        """Every run, most recently updated first."""

    def machine(self, run_id: str) -> MachineRecord | None:
        """What the run recorded of its machine (None for a run stored before runs
        recorded it); :class:`UnknownRunError` when there is no such run."""

    def stored_bytes(self) -> int:
        """Bytes of message and checkpoint data stored (for the linear-storage check)."""

    def close(self) -> None: ...
