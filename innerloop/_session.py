"""Conversations: a chat host's session on a harness, message after message.

A conversation is one run that goes on: its id is the conversation id, and after each
message's run ends in a final state (``model_complete``, ``max_turns_exceeded``,
``failed``...), the next user message continues the same run from its latest state (the
message appended, the final state cleared, from the machine's initial state), and the
run's checkpoint writer continues the same sequence. So a stored conversation is one run
in the checkpoint store, each message written once, and ``harness.runs()`` lists it with
its totals; ``harness.resume`` and ``harness.fork`` take its id like any run's.

Each message is a run of its own for the limits: ``max_turns`` and ``spend_budget`` count
from the message's start (``HarnessState.turns_at_start``...), while the state's
counters (``turns``, ``usage``, ``cost_usd``) are the conversation's totals.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, final

import attrs

from innerloop._errors import ResumeError, SessionError, SessionLimitError
from innerloop._events import Event
from innerloop._history import History
from innerloop._messages import Message, Usage
from innerloop._validators import field_check, instance, integer, optional
from innerloop.checkpoint import (
    Checkpoint,
    Checkpointer,
    CheckpointError,
    CheckpointInfo,
    CheckpointWriter,
    UnknownRunError,
)
from innerloop.checkpoint._types import check_run_id
from innerloop.fsm._compile import CompiledMachine
from innerloop.fsm._driver import Run
from innerloop.fsm._params import HarnessParams, SpendBudget
from innerloop.fsm._state import HarnessState

__all__ = ["Session", "SessionHost", "SessionMessage", "SessionTotals", "next_message_state"]

N = TypeVar("N", int, float)


class SessionHost(Protocol):
    """What a :class:`Session` uses of its :class:`~innerloop.Harness`: its machine,
    params and store, and its own ways of making, continuing and driving a run."""

    @property
    def machine(self) -> CompiledMachine: ...

    @property
    def params(self) -> HarnessParams: ...

    @property
    def checkpointer(self) -> Checkpointer | None: ...

    def checkpoint(self, run_id: str, seq: int | None = None) -> Checkpoint: ...

    def checkpoints(self, run_id: str) -> list[CheckpointInfo]: ...

    def _writer(self, run_id: str, last: Checkpoint | None = None) -> CheckpointWriter: ...

    def _run(
        self,
        state: HarnessState,
        at: str,
        run_id: str | None,
        writer: CheckpointWriter | None,
        params: HarnessParams | None = None,
    ) -> Run: ...

    def _continue(
        self, run_id: str | None, at: str | None, state: HarnessState, answer: Any
    ) -> tuple[str, HarnessState]: ...

    def _drive_sync(
        self,
        make: Callable[[], Run],
        on_event: Callable[[Event], None] | None,
        call: str,
        fix: str,
    ) -> HarnessState: ...


@attrs.frozen
class SessionTotals:
    """A conversation's counters over all its messages."""

    turns: int = 0
    usage: Usage = Usage()
    cost_usd: float | None = 0.0
    """None once a model without a price answered (see ``HarnessParams.prices``)."""


@attrs.frozen
class SessionMessage:
    """Where one message of a stored conversation is in its checkpoints: what
    ``session.fork(at=...)`` takes, or ``session.fork(message=number)`` finds."""

    number: int
    """1 for the conversation's first message (one sent in this conversation's run; a
    fork's messages count from its own first)."""
    first: int
    """The ``seq`` of its first checkpoint: the message appended, at the initial state."""
    last: int
    """The ``seq`` of its last checkpoint: where it ended (or, for a message still going
    on, where it is now)."""
    state: str
    """The state of its last checkpoint (``model_complete``, ``suspended``, ...)."""


def next_message_state(previous: HarnessState | None, message: Message) -> HarnessState:
    """The state a conversation's next message starts from: ``previous``'s history with
    ``message`` (merged into the last message when that is a user message the model never
    answered, so roles keep alternating), and its totals (``turns``, ``usage``,
    ``cost_usd``, ``errors``, ``total_wait``, ``resolved_models``), tasks and notes; every
    other field starts afresh (no final state, no abort or interrupt, no error, the primary
    model), and the limits count from here. ``previous`` is left as it is."""
    if previous is None:
        state = HarnessState(history=History([message]))
    else:
        history = previous._hand_on_history()  # the list itself, when nobody else holds it
        if history and history[-1].role == "user":
            history[-1] = Message("user", (*history[-1].content, *message.content))
        else:
            history.append(message)
        state = HarnessState(
            history=history,
            tasks=list(previous.tasks),
            usage=previous.usage,
            turns=previous.turns,
            errors=dict(previous.errors),
            total_wait=previous.total_wait,
            cost_usd=previous.cost_usd,
            resolved_models=list(previous.resolved_models),
            notes=copy.deepcopy(previous.notes),
        )
    state.start_run()
    return state


def _check_max_turns(max_turns: int | None) -> None:
    """A message's own ``max_turns`` checked as ``HarnessParams.max_turns`` is (None: the
    params' own): :class:`~innerloop.ParamsError` naming ``max_turns`` otherwise."""
    optional(field_check(HarnessParams, "max_turns")).verify("max_turns", max_turns)


def _user_message(message: str | Message) -> Message:
    if isinstance(message, str):
        return Message.user(message)
    if message.role != "user":
        raise ValueError(
            f"a conversation takes user messages, got a {message.role!r} one; pass the "
            "text, or Message.user(...)"
        )
    return message


@final
class Session:
    """A conversation on a harness: ``await session.send("text")`` runs one user message to
    a final state and returns the state (the whole conversation's history and totals).

    With the harness's checkpoint store, the conversation is the stored run
    ``conversation_id``: any process with a harness built like this one goes on with
    ``harness.session(conversation_id)``. Without a store, the session keeps the state.

    ``max_turns`` and ``spend_budget`` of the params apply to each message;
    ``max_turns_total`` and ``spend_budget_total`` (optional) to the whole conversation: a
    message's run stops at whichever comes first (``max_turns_exceeded`` or
    ``budget_exceeded``), and once the conversation's limit is spent,
    :attr:`limit_reached` names it and :meth:`send` raises :class:`SessionLimitError`.
    These limits are not stored: give a session the same ones in every process.

    A message whose run suspends (an approval machine, a tool calling
    ``ctx.interrupt``) goes on with :meth:`resume` and its answer before the next one.
    """

    def __init__(
        self,
        harness: SessionHost,
        conversation_id: str | None = None,
        *,
        max_turns_total: int | None = None,
        spend_budget_total: SpendBudget | None = None,
    ) -> None:
        optional(integer(ge=1)).verify("max_turns_total", max_turns_total)
        optional(instance(SpendBudget)).verify("spend_budget_total", spend_budget_total)
        self.harness = harness
        self.conversation_id = (
            uuid.uuid4().hex
            if conversation_id is None
            else check_run_id(conversation_id, "conversation id", "; pass None for a new one")
        )
        self.max_turns_total = max_turns_total
        self.spend_budget_total = spend_budget_total
        self._store = harness.checkpointer
        self._state: HarnessState | None = None
        """The latest state known here (a final one, or the one a run goes on with)."""
        self._writer: CheckpointWriter | None = None
        """The writer that wrote the stored latest checkpoint, to continue its sequence."""
        self._at: str | None = None
        """The state of the stored latest checkpoint, as read."""
        self._read = False
        self._run: Run | None = None
        self._max_turns: int | None = None
        """The running (or last) message's own ``max_turns`` (``send(..., max_turns=)``),
        kept for its resume by this object."""

    # -- what the conversation holds --------------------------------------------------------

    @property
    def state(self) -> HarnessState | None:
        """The latest state (the running message's, while it runs); None before the
        first message."""
        return self._latest()

    @property
    def history(self) -> list[Message]:
        """The conversation's messages so far."""
        state = self._latest()
        return [] if state is None else state.history

    @property
    def totals(self) -> SessionTotals:
        """Turns, usage and cost over every message so far."""
        state = self._latest()
        if state is None:
            return SessionTotals()
        return SessionTotals(state.turns, state.usage, state.cost_usd)

    @property
    def seq(self) -> int | None:
        """The number of the stored latest checkpoint (what :meth:`fork` takes as
        ``at``); None in memory or before the first message."""
        self._latest()
        return None if self._writer is None else self._writer.seq

    @property
    def limit_reached(self) -> str | None:
        """The conversation-wide limit that is spent (``"max_turns_total"``,
        ``"spend_budget_total.max_tokens"`` or ``"spend_budget_total.max_cost_usd"``);
        None while messages can go on."""
        state = self._latest()
        if state is None:
            return None
        spent = self._spent(state.turns, state.usage.total_tokens, state.cost_usd)
        return None if spent is None else spent[0]

    def _latest(self) -> HarnessState | None:
        if self._run is not None:
            self.settle()
        if self._run is not None:
            return self._run.state
        if self._state is None and self._store is not None and not self._read:
            self._load()
        return self._state

    def settle(self) -> None:
        """Let go of the last message's run once it has ended (a final state other than
        ``suspended``; otherwise nothing happens): the session keeps the run's state,
        which the next message goes on from, and the run (its tasks, scopes, requests,
        child runs) is freed as soon as its reader drops it.

        Every look at the session (:attr:`state`, :attr:`history`, the next
        :meth:`start`...) does this first; a host that keeps many sessions and drives
        their runs itself (``session.start(...)``) calls it as each run ends, e.g. from a
        done callback of the task reading it, so an idle conversation holds its state
        alone."""
        run = self._run
        if run is not None and run.state.final_state not in (None, "suspended"):
            self._state, self._at, self._run = run.state, run.current, None

    def _forget(self) -> None:
        """Drop what this session knows: the next look reads the store again."""
        self._state = self._writer = self._at = self._run = None
        self._read = False

    def _load(self) -> None:
        """Read the stored latest checkpoint (none yet: a new conversation)."""
        self._forget()
        self._read = True
        try:
            last = self.harness.checkpoint(self.conversation_id)
        except UnknownRunError:
            return
        self._state, self._at = last.state, last.info.state
        self._writer = self.harness._writer(self.conversation_id, last)

    # -- messages ---------------------------------------------------------------------------

    def start(self, message: str | Message, *, max_turns: int | None = None) -> Run:
        """The run of the next user message, to drive (``async for event in
        run.events()``, ``await run.run()``); its first checkpoint is written now.
        ``max_turns`` is this message's own turn limit in place of the params' (checked
        as theirs is: an integer >= 1, else :class:`~innerloop.ParamsError` here, before
        anything is written); a conversation-wide limit still lowers it.

        :class:`SessionError` when the last message's run waits for an answer or has not
        ended; :class:`SessionLimitError` when a conversation-wide limit is spent."""
        _check_max_turns(max_turns)
        user = _user_message(message)
        try:
            return self._start(user, max_turns)
        except CheckpointError as exc:
            if isinstance(exc, UnknownRunError):
                raise
            # another process (or session object) continued the conversation since this
            # one last read it: nothing was written; go on from its latest message
            self._forget()
            return self._start(user, max_turns)

    def _start(self, message: Message, max_turns: int | None) -> Run:
        previous = self._latest()
        if previous is not None and _waits(previous) and self._store is not None:
            self._load()  # another process may have taken it to its end since
            previous = self._latest()
        if previous is not None:
            self._check_between_messages(previous)
        state = next_message_state(previous, message)
        params = self._params(state, max_turns)
        writer = self._writer
        if self._store is not None:
            if writer is None:
                writer = self._create()
            writer.save(state, self.harness.machine.initial)
        run = self.harness._run(
            state,
            self.harness.machine.initial,
            None if self._store is None else self.conversation_id,
            writer,
            params,
        )
        self._state, self._writer, self._run = state, writer, run
        self._read, self._max_turns = True, max_turns
        return run

    def _create(self) -> CheckpointWriter:
        """The writer of a new stored conversation (its run recorded now)."""
        assert self._store is not None
        try:
            self._store.create_run(self.conversation_id, self.harness.machine.name)
        except CheckpointError:
            if self._store.checkpoints(self.conversation_id):
                raise  # written meanwhile: the caller reads it and goes on from there
            # recorded by a first message whose first checkpoint never got written
        return self.harness._writer(self.conversation_id)

    def _check_between_messages(self, state: HarnessState) -> None:
        if state.final_state == "suspended":
            on = "" if state.interrupt is None else f" on a {state.interrupt.kind!r} interrupt"
            raise SessionError(
                self.conversation_id,
                f"its last message is suspended{on}; answer it with "
                "session.resume(answer) (then drive the run), then send the next message",
            )
        if state.final_state is None:
            cut_off = (
                "session.resume() continues it from its latest checkpoint"
                if self._store is not None
                else "a session without a checkpoint store cannot continue it: start a "
                "new conversation"
            )
            raise SessionError(
                self.conversation_id,
                f"its last message's run has not ended (it is in {self._current()!r}); "
                f"drive that run to its end, or, if it was cut off (a crash, a cancelled "
                f"task), {cut_off}",
            )

    def _current(self) -> str:
        if self._run is not None:
            return self._run.current
        return self._at or "?"

    async def send(self, message: str | Message, *, max_turns: int | None = None) -> HarnessState:
        """Run the next user message to a final state; returns the conversation's state
        (``state.history[-1]`` is the reply when it ended in ``model_complete``).
        ``max_turns``: this message's own turn limit (see :meth:`start`)."""
        return await self.start(message, max_turns=max_turns).run()

    def send_sync(
        self,
        message: str | Message,
        *,
        max_turns: int | None = None,
        on_event: Callable[[Event], None] | None = None,
    ) -> HarnessState:
        """:meth:`send` for hosts without an event loop, on the harness's sync facade
        (``with harness:`` shares one loop between the calls); ``on_event`` sees each
        event."""
        _check_max_turns(max_turns)  # at the call, not in the loop
        return self.harness._drive_sync(
            lambda: self.start(message, max_turns=max_turns),
            on_event,
            "session(...).send_sync",
            "which it would block; in async code use `await session.send(...)` instead",
        )

    def resume(self, answer: Any = None) -> Run:
        """The last message's run going on: with ``answer`` when it is suspended (see
        :class:`~innerloop.fsm.Interrupt`), without one when it was cut off before a final
        state (stored conversations: from the latest checkpoint). :class:`ResumeError`
        says what does not fit; nothing is written then.

        Resumed by the session object that ran it, the message keeps its own
        ``max_turns`` (given to :meth:`send`), and the run keeps the one it goes on from
        as ``resumed_from`` (its :class:`~innerloop.RunTree` holds both)."""
        earlier = self._run
        if self._store is not None:
            self._load()  # what is stored now: another process may have gone on
        state = self._latest()
        if state is None:
            raise ResumeError(self.conversation_id, "the conversation has no message yet")
        if state.final_state not in (None, "suspended"):
            raise ResumeError(
                self.conversation_id,
                f"its last message ended ({state.final_state}) and waits for nothing; "
                "send the next message with session.send(...)",
                answer,
            )
        run_id = None if self._store is None else self.conversation_id
        if state.final_state is None and self._store is None:
            raise ResumeError(
                self.conversation_id,
                "its last message's run stopped before a final state, and a session "
                "without a checkpoint store has nothing to continue it from; pass "
                "Harness(..., checkpointer=...) to resume cut-off runs",
            )
        at = state.final_state if self._store is None else self._at
        at, state = self.harness._continue(run_id, at, state, answer)
        mine = earlier is not None and _same_message(earlier.state, state)
        params = self._params(state, self._max_turns if mine else None)
        run = self.harness._run(state, at, run_id, self._writer, params)
        if mine:
            run.resumed_from = earlier
        self._state, self._run = state, run
        return run

    def messages(self) -> list[SessionMessage]:
        """Each message of the stored conversation, in order, with its first and last
        checkpoint (what ``fork(at=...)`` takes; ``fork(message=n)`` finds it). A session
        without a checkpoint store keeps no checkpoints: :class:`ValueError` then."""
        if self._store is None:
            raise ValueError(
                "messages() reads the conversation's checkpoints; a session without a "
                "checkpoint store has none (pass Harness(..., checkpointer=...))"
            )
        try:
            infos = self.harness.checkpoints(self.conversation_id)
        except UnknownRunError:
            return []
        machine = self.harness.machine
        found: list[SessionMessage] = []
        before: CheckpointInfo | None = None
        for info in infos:  # a message starts at the initial state, after a final one
            starts = info.source is None and info.state == machine.initial
            if starts and (before is None or before.state in machine.finals):
                found.append(SessionMessage(len(found) + 1, info.seq, info.seq, info.state))
            elif found:
                found[-1] = attrs.evolve(found[-1], last=info.seq, state=info.state)
            before = info
        return found

    def fork(
        self,
        *,
        at: int | None = None,
        message: int | None = None,
        conversation_id: str | None = None,
    ) -> Session:
        """A new conversation going on from this one's checkpoint ``at`` (the latest when
        None; see :attr:`seq`), or from the end of its message number ``message`` (1 for
        the first; see :meth:`messages`), this one left as it is; with the same limits.
        In memory, the fork copies the latest state (``at`` and ``message`` must be
        None)."""
        if message is not None:
            at = self._end_of(message, at)
        child = Session(
            self.harness,
            conversation_id,
            max_turns_total=self.max_turns_total,
            spend_budget_total=self.spend_budget_total,
        )
        if self._store is None:
            if at is not None:
                raise ValueError(
                    "fork(at=...) names a stored checkpoint; a session without a "
                    "checkpoint store forks its latest state only (at=None)"
                )
            state = self._latest()
            if state is not None:
                self._check_forkable(state)
            child._state = copy.deepcopy(state)
            return child
        parent = self.harness.checkpoint(self.conversation_id, at)
        self._store.create_run(
            child.conversation_id,
            self.harness.machine.name,
            parent_run_id=self.conversation_id,
            parent_seq=parent.info.seq,
        )
        self.harness._writer(child.conversation_id).save(parent.state, parent.info.state)
        return child

    def _end_of(self, message: int, at: int | None) -> int:
        """The last checkpoint of message number ``message``: a clear error when it names
        none (or comes with ``at`` too)."""
        integer(ge=1).verify("message", message)
        if at is not None:
            raise ValueError(
                f"fork(at={at}, message={message}): give one, a checkpoint (at=) or a "
                "message number (message=)"
            )
        if self._store is None:
            raise ValueError(
                "fork(message=...) names a stored message; a session without a checkpoint "
                "store forks its latest state only (message=None)"
            )
        found = self.messages()
        if message > len(found):
            there = f"messages 1 to {len(found)}" if found else "no message yet"
            raise ValueError(
                f"fork(message={message}): conversation {self.conversation_id!r} has "
                f"{there}; session.messages() lists them"
            )
        return found[message - 1].last

    def _check_forkable(self, state: HarnessState) -> None:
        if state.final_state is None:
            raise SessionError(
                self.conversation_id,
                "its last message's run has not ended; fork between messages",
            )

    def _spent(self, turns: int, tokens: int, cost: float | None) -> tuple[str, str] | None:
        """The conversation-wide limit spent at these totals, and how: None if none."""
        if self.max_turns_total is not None and turns >= self.max_turns_total:
            return "max_turns_total", f"{turns} turns of max_turns_total={self.max_turns_total}"
        total = self.spend_budget_total
        if total is None:
            return None
        if total.max_tokens is not None and tokens >= total.max_tokens:
            return (
                "spend_budget_total.max_tokens",
                f"{tokens} tokens of spend_budget_total.max_tokens={total.max_tokens}",
            )
        if total.max_cost_usd is not None and cost is not None and cost >= total.max_cost_usd:
            return (
                "spend_budget_total.max_cost_usd",
                f"${cost:.4f} of spend_budget_total.max_cost_usd={total.max_cost_usd}",
            )
        return None

    def _params(self, state: HarnessState, max_turns: int | None = None) -> HarnessParams:
        """The params of a message's run: the harness's (with the message's own
        ``max_turns``, when given), with ``max_turns`` and ``spend_budget`` lowered to
        what the conversation has left when that is less. :class:`SessionLimitError`
        when nothing is left."""
        params = self.harness.params
        own = params.max_turns if max_turns is None else max_turns
        cost = state.cost_at_start if state.cost_usd is not None else None
        spent = self._spent(state.turns_at_start, state.tokens_at_start, cost)
        if spent is not None:
            limit, how = spent
            raise SessionLimitError(
                self.conversation_id,
                limit,
                f"its {limit} is spent ({how}); start a new conversation, or open this "
                "one with a higher limit",
            )
        changes: dict[str, Any] = {} if own == params.max_turns else {"max_turns": own}
        if self.max_turns_total is not None:
            left = self.max_turns_total - state.turns_at_start
            if left < own:
                changes["max_turns"] = left
        total = self.spend_budget_total
        if total is not None:
            budget = params.spend_budget or SpendBudget()
            tokens = _lower(budget.max_tokens, total.max_tokens, state.tokens_at_start)
            dollars = _lower(budget.max_cost_usd, total.max_cost_usd, state.cost_at_start)
            if (tokens, dollars) != (budget.max_tokens, budget.max_cost_usd):
                changes["spend_budget"] = SpendBudget(tokens, dollars)
        return params.evolve(**changes)

    def __repr__(self) -> str:
        state = self._latest()
        where = "new" if state is None else (state.final_state or self._current())
        turns = 0 if state is None else state.turns
        return f"<Session {self.conversation_id!r} {where} turns={turns}>"


def _same_message(one: HarnessState, other: HarnessState) -> bool:
    """Are ``one`` and ``other`` states of the same message (its turns and spending
    counted from the same start)?"""
    return (one.turns_at_start, one.tokens_at_start, one.cost_at_start) == (
        other.turns_at_start,
        other.tokens_at_start,
        other.cost_at_start,
    )


def _waits(state: HarnessState) -> bool:
    """Is the message of ``state`` not done (suspended, or not at a final state)?"""
    return state.final_state is None or state.final_state == "suspended"


def _lower(run: N | None, total: N | None, used: N) -> N | None:
    """A run's limit lowered to what is left of a conversation's (``total - used``)."""
    if total is None:
        return run
    left = total - used
    return left if run is None or left < run else run
