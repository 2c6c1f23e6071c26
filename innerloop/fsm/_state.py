"""HarnessState: everything that evolves while the loop runs, as plain data.

Nothing here is a live object: the request being built, the open stream and the abort
signal's lock belong to the driver (``innerloop.fsm._context``). So a state can be
copied, compared, written to JSON and read back at any transition.
"""

from __future__ import annotations

import time
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Generic

import attrs

from innerloop._errors import ProviderError
from innerloop._history import History, Link, items_of, unshared
from innerloop._messages import Message, ModelResponse, ToolResultBlock, Usage
from innerloop._tasks import Task
from innerloop.fsm._output import OutputT

__all__ = [
    "AbortRequest",
    "Answer",
    "HarnessState",
    "Interrupt",
    "Outcome",
    "OutcomeEnum",
    "Task",
]


class OutcomeEnum(StrEnum):
    """Base of every outcome enum. A custom state declares its own subclass::

        class ApprovalOutcome(OutcomeEnum):
            APPROVED = "approved"
            DENIED = "denied"

    Guards compare with ``==``. Read back from JSON, an outcome is found by its value
    among ``Outcome`` and every subclass defined so far.
    """


class Outcome(OutcomeEnum):
    """What the last phase of the default machine did; the guards read it."""

    STARTED = "started"
    ASSEMBLED = "assembled"
    COMPACTED = "compacted"
    CANNOT_SHRINK = "cannot_shrink"
    NORMALIZED = "normalized"
    OPENED = "opened"
    FAILED = "failed"
    RESPONSE = "response"
    EXECUTED = "executed"
    CHECKED = "checked"
    WAITED = "waited"
    SWITCHED = "switched"
    ABORTED = "aborted"
    INTERRUPTED = "interrupted"
    OUTPUT_INVALID = "output_invalid"
    REPAIRED = "repaired"
    OUTPUT_REJECTED = "output_rejected"


@attrs.frozen
class AbortRequest:
    """An abort asked for: why, and when (seconds since the epoch)."""

    reason: str = "abort requested by the host"
    at: float = attrs.Factory(time.time)


@attrs.frozen
class Interrupt:
    """A run paused to wait for an answer from outside (a person, another system).

    The run ends in the final state ``suspended`` holding this record;
    ``Harness.resume(run, answer)`` enters ``state`` again with ``answer`` set, and the
    handler of that state (the one that interrupted) reads it and goes on.
    """

    kind: str
    """``"approval"`` (answer: True, False, or ``{tool_use_id: bool}``), ``"question"``
    (a tool asked; answer: its tool result, or ``{tool_use_id: answer}`` when several
    asked) or a custom state's own kind."""
    payload: Any
    """What the host is asked, as JSON data."""
    state: str
    """The state that interrupted; the run resumes there."""
    tool_use_ids: tuple[str, ...] = ()
    """The tool calls waiting for the answer."""
    done: tuple[ToolResultBlock, ...] = ()
    """Results of calls of the same batch that had finished: they never run again."""
    answered: bool = False
    answer: Any = None
    """Set by ``Harness.resume``; JSON data."""
    path: str = ""
    """The path of the child run that asked (``clean``, ``survey/web#2``,
    ``forecaster[toolu_01]``), empty when this run asked itself; the answer lands there."""
    id: str = ""
    """This suspension's id within its run (``"approve:1"``: the state that asked and the
    run's count of interrupts): an answer given as ``Answer(id, value)`` is taken only
    while the run waits on this interrupt, and only once. Empty in runs stored before
    interrupts had ids."""


@attrs.frozen
class Answer:
    """An answer bound to the interrupt it answers: ``harness.resume(run,
    Answer(state.interrupt.id, True))``. The run takes it only while it waits on that
    interrupt, and only once (a second resume of the same suspension is refused, in any
    process sharing the checkpoint store). A bare answer (``resume(run, True)``) does too
    when given a suspended ``Run``, or a run that waits on one question alone."""

    interrupt_id: str
    """The :attr:`Interrupt.id` answered."""
    value: Any
    """The answer itself, JSON data (as for a bare answer)."""


@attrs.define(eq=False, repr=False)
class HarnessState(Generic[OutputT]):
    """Mutable state of one run. Phase handlers write it; guards only read it.

    To stop a run from another thread or task, call ``Run.abort()``: it also wakes whatever
    the run is waiting on. ``request_abort`` only records the request; the run sees it at
    its next phase or stream event.
    """

    history: list[Message] = attrs.Factory(History)
    """The messages so far: a ``list`` that also keeps track of how it changed (an append,
    an edit of its last messages), so what a call derives from it (its wire messages,
    the fingerprints, the token count) goes on from the last call's without comparing the
    messages before; a copy of it (``type(history)(history)``) shares that. Any list may
    be given or assigned: it is then compared with the last one seen, at each call.

    A conversation's next message goes on with this very list when nothing else holds it
    (:class:`~innerloop.Session`): this state's ``history`` then reads as it was, a list
    made again from the conversation's messages when first read."""
    tasks: list[Task] = attrs.Factory(list)
    usage: Usage = Usage()
    turns: int = 0
    """Model responses received so far."""
    active: int = 0
    """Index of the active model in ``params.model_chain``."""
    degraded: bool = False
    """True once the run has fallen back from its primary model."""
    abort: AbortRequest | None = None
    """The pending abort request, if any (the first one wins)."""
    interrupt: Interrupt | None = None
    """The pending interrupt: set by ``ctx.interrupt`` (or a tool's), read on resume."""
    outcome: OutcomeEnum = Outcome.STARTED
    """What the last phase did; the guards read it."""
    exit_reason: str | None = None
    final_state: str | None = None

    # counters
    errors: dict[str, int] = attrs.Factory(dict)
    """Failures so far per error category (for the whole run)."""
    tool_failures: dict[str, int] = attrs.Factory(dict)
    """Consecutive failures per tool name; a success resets it."""
    rate_limit_failures: int = 0
    """Consecutive rate-limit/overload failures on the active model."""
    transient_failures: int = 0
    """Consecutive transient failures (5xx, malformed, empty, dropped)."""
    backoff_attempts: int = 0
    total_wait: float = 0.0
    cost_usd: float | None = 0.0
    resolved_models: list[str] = attrs.Factory(list)
    """The model ids the providers reported for the answers so far, each once, in the
    order first seen (bounded by the models used, not by the calls made)."""
    interrupts: int = 0
    """Interrupts raised so far; numbers the next one's :attr:`Interrupt.id`."""
    turns_at_start: int = 0
    """``turns`` when this run started: ``params.max_turns`` counts the turns from here, so
    a run continuing a conversation (``Harness.start(prompt, state=earlier)``, a
    :class:`~innerloop.Session` message) has its own turn limit."""
    tokens_at_start: int = 0
    """``usage.total_tokens`` when this run started: ``spend_budget.max_tokens`` counts
    from here."""
    cost_at_start: float = 0.0
    """``cost_usd`` when this run started: ``spend_budget.max_cost_usd`` counts from here."""

    # the current turn
    context_tokens: int = 0
    error: ProviderError | None = None
    """The failure of the last call or stream, if it failed."""
    last_response: ModelResponse | None = None
    compaction_reason: str | None = None
    diagnostic: dict[str, Any] | None = None
    output_data: Any = None
    """The validated final answer as JSON data (with ``params.output_type``); what the
    state's JSON form and checkpoints keep."""
    output: OutputT | None = attrs.field(default=None, init=False)
    """The validated final answer as an ``output_type`` value (a model, dataclass or
    TypedDict instance; the JSON data for a schema dict). Not written to JSON: a resumed
    run rebuilds it from ``output_data`` with the params' ``output_type``."""
    output_problems: list[str] = attrs.Factory(list)
    """How the last answer broke ``output_type`` (empty when it matched)."""
    output_repairs: int = 0
    """Answers sent back to the model for repair so far."""
    notes: dict[str, Any] = attrs.Factory(dict)
    """Free space for custom states and hosts (JSON values, so the state stays data)."""
    _handed_on: tuple[Link[Message] | None] | None = attrs.field(
        default=None, init=False, eq=False, repr=False
    )
    """The link of the history's last message when the list was handed on (see
    :meth:`_hand_on_history`): what ``history`` is made again from when next read."""

    def _hand_on_history(self) -> History[Message]:
        """The history for the state going on from this one (a conversation's next
        message) to add to: the list itself when nothing else holds it, so a message costs
        no copy of the conversation (this state then reads its ``history`` as it was, made
        again from its chain of links when read: see :meth:`__getattr__`); else a copy of
        it (sharing its chain)."""
        history = self.history
        if type(history) is not History or not unshared(self.history, 2):  # and `history`
            return History(history)
        self._handed_on = (history.head(),)
        del self.history
        return history

    if not TYPE_CHECKING:  # (a type checker would take any attribute name then)

        def __getattr__(self, name: str) -> Any:
            """Only ever called for ``history`` after :meth:`_hand_on_history` gave the
            list away: the list of this state's messages, made again from the chain."""
            if name == "history":
                handed = self._handed_on
                if handed is not None:
                    history = History.made(items_of(handed[0]), handed[0])
                    self.history, self._handed_on = history, None
                    return history
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __repr__(self) -> str:
        # bounded: asyncio formats the main task's repr while a run goes on, and a
        # history of 10,000 messages must not be rendered then
        where = self.final_state or "running"
        waits = f" waits={self.interrupt.id or self.interrupt.kind!r}" if self.interrupt else ""
        return (
            f"<HarnessState {where} turns={self.turns} messages={len(self.history)} "
            f"tokens={self.usage.total_tokens}{waits}>"
        )

    @property
    def abort_requested(self) -> bool:
        return self.abort is not None

    def request_abort(self, reason: str = "abort requested by the host") -> bool:
        """Record an abort request; False if one was already pending (it is kept)."""
        if self.abort is not None:
            return False
        self.abort = AbortRequest(reason)
        return True

    def start_run(self) -> None:
        """Count this run's turns and spending from here (``max_turns`` and
        ``spend_budget`` apply per run); the totals go on counting."""
        self.turns_at_start = self.turns
        self.tokens_at_start = self.usage.total_tokens
        self.cost_at_start = self.cost_usd or 0.0

    def count_error(self, category: str) -> None:
        self.errors[category] = self.errors.get(category, 0) + 1

    @property
    def pending_tool_uses(self) -> tuple[str, ...]:
        """Ids of tool calls in the last assistant message that have no result yet."""
        if not self.history:
            return ()
        last = self.history[-1]
        if last.role != "assistant":
            return ()
        return tuple([b.id for b in last.tool_uses])  # a list is made faster than a generator runs
