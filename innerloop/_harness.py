"""Harness: the front door. Builds a run from params, providers and a machine."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
import uuid
import warnings
import weakref
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Generic, Self, TypeVar

from innerloop._errors import ResumeError
from innerloop._events import RunEvent
from innerloop._messages import Message
from innerloop._session import Session
from innerloop._tasks import Task
from innerloop.checkpoint import (
    Checkpoint,
    CheckpointCommit,
    Checkpointer,
    CheckpointEvery,
    CheckpointInfo,
    CheckpointWriter,
    RunInfo,
    decode,
    open_checkpointer,
    resume_point,
)
from innerloop.fsm._compile import CompiledMachine, compile_spec
from innerloop.fsm._context import Deps, request_settings
from innerloop.fsm._default import DEFAULT_SPEC
from innerloop.fsm._driver import Engine, Run, RunObserver, TransitionObserver
from innerloop.fsm._interrupts import check_answer
from innerloop.fsm._locate import MachineRecord, recorded_hint
from innerloop.fsm._output import OUTPUT_TOOL, OutputT
from innerloop.fsm._params import HarnessParams, SpendBudget
from innerloop.fsm._spec import MachineSpec
from innerloop.fsm._state import HarnessState, Interrupt
from innerloop.providers._base import Provider
from innerloop.providers._normalize import check_sendable
from innerloop.providers._servertools import check_server_tools
from innerloop.recovery._clock import Clock, SystemClock
from innerloop.recovery._compaction import Compactor, TruncatingCompactor
from innerloop.recovery._gate import RateLimitGates, shared_gates
from innerloop.recovery._tokens import MessageTokenCache, TiktokenCounter, TokenCounter
from innerloop.tools._runner import ToolExecutor, ToolRunner

__all__ = ["Harness"]

T = TypeVar("T")


def _provider_map(providers: Mapping[str, Provider] | Iterable[Provider]) -> dict[str, Provider]:
    if isinstance(providers, Mapping):
        return dict(providers)
    return {p.name: p for p in providers}


class _SyncLoop:
    """The event loops of a harness's sync facade. Outside a ``with`` block each
    ``run_sync`` gets a loop of its own, closed when it returns (as ``asyncio.run``);
    inside, the calls share one loop, made at the first and closed at the block's end, so
    the connections a run opened carry the next run's requests. Closing a loop runs what
    the providers left to do at its end: close the SDK clients they built, drop the
    pooled connections of a client given to them (which stays open)."""

    __slots__ = ("lock", "runner", "shared")

    def __init__(self) -> None:
        self.shared = False  # inside a with block
        self.runner: asyncio.Runner | None = None  # the shared loop, once made
        self.lock = threading.Lock()  # the shared loop runs one sync run at a time

    def run(self, make: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """Run the coroutine ``make()`` returns (made once the loop is sure to be free)."""
        if not self.shared:
            with _runner() as runner:
                return runner.run(make())
        if not self.lock.acquire(blocking=False):
            raise RuntimeError(
                "this Harness is in run_sync in another thread, and inside `with harness:` "
                "its sync runs share one event loop, one run at a time; give each thread a "
                "Harness of its own, or run them concurrently on one loop with "
                "asyncio.gather(harness.run(...), ...)"
            )
        try:
            if self.runner is None:
                self.runner = _runner()
            return self.runner.run(make())
        finally:
            self.lock.release()

    def open(self) -> None:
        if self.shared:
            raise RuntimeError(
                "this Harness is already open (inside a `with harness:` block); use the "
                "outer block's harness, or build a second Harness"
            )
        self.shared = True

    def close(self) -> None:
        with self.lock:
            self.shared = False
            runner, self.runner = self.runner, None
            if runner is not None:
                runner.close()  # cancels the loop-end tasks: they close the connections

    def abandoned(self) -> None:
        """The harness was collected (or the interpreter exits) inside its ``with``
        block, its shared loop still open: close the loop now, then say so, as an unclosed
        file does."""
        if self.runner is None:
            return
        with contextlib.suppress(RuntimeError):  # collected inside a running loop
            self.close()
        warnings.warn(
            "a Harness was never closed: the event loop its run_sync calls shared (and the "
            "connections open on it) was closed by the garbage collector; leave the "
            "`with harness:` block, or call harness.close(), when done",
            ResourceWarning,
            stacklevel=2,
        )


def _runner() -> asyncio.Runner:
    """A runner on a new loop, which is not made the thread's current loop."""
    return asyncio.Runner(loop_factory=asyncio.new_event_loop)


def _outside_a_loop(call: str, fix: str) -> None:
    """Raise when an event loop runs in this thread: a sync call would block it."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise RuntimeError(f"Harness.{call} was called inside a running event loop, {fix}")


class Harness(Generic[OutputT]):
    """Runs the loop for ``params`` with the given providers (keyed by provider name, as
    used in ``params.model`` and ``params.fallbacks``).

    ``observers`` watch every run: a :class:`TransitionObserver` sees each transition, a
    :class:`RunObserver` (``innerloop.observe.Tracing``) each event and tool call.

    With a ``checkpointer`` (a store, or a URL for :func:`~innerloop.checkpoint.
    open_checkpointer`), every run gets an id and is checkpointed at the transitions
    ``checkpoint_every`` picks, committed as ``checkpoint_commit`` says (``"barrier"``:
    grouped, and committed before every step with an external effect and at the end;
    ``"each"``: one by one; see :class:`~innerloop.checkpoint.CheckpointWriter`);
    :meth:`resume`, :meth:`fork` and :meth:`runs` read the store. Without one,
    :meth:`resume` takes a suspended run (or its state) in memory.

    :meth:`run_sync` drives each run on a private event loop of its own; inside
    ``with harness:`` (or ``with Harness(...) as harness:``) its calls share one, closed at
    the block's end (or by :meth:`close`). Async runs (:meth:`run`, :meth:`start`) use the
    caller's loop.

    A harness is generic over the type of its runs' answer, read off its params
    (``HarnessParams(output_type=Weather)``): ``harness.run_sync(...).output`` is then
    ``Weather | None`` to a type checker; without an ``output_type``, ``Any``.
    """

    def __init__(
        self,
        params: HarnessParams[OutputT],
        providers: Mapping[str, Provider] | Iterable[Provider],
        *,
        machine: MachineSpec | CompiledMachine = DEFAULT_SPEC,
        clock: Clock | None = None,
        token_counter: TokenCounter | None = None,
        compactor: Compactor | None = None,
        observers: Sequence[TransitionObserver | RunObserver] = (),
        engine: Engine = "table",
        tool_runner_factory: Callable[[], ToolExecutor] = ToolRunner,
        checkpointer: Checkpointer | str | Path | None = None,
        checkpoint_every: CheckpointEvery = "transition",
        checkpoint_commit: CheckpointCommit = "barrier",
        gates: RateLimitGates | None = None,
    ) -> None:
        self.params = params
        self.settings = request_settings(params)
        """What every request of its runs carries besides the history (built once)."""
        self.providers = _provider_map(providers)
        self._dialects = [
            str(getattr(self.providers.get(c.provider), "dialect", "")) for c in params.model_chain
        ]
        """The wire format of each model of the chain: a prompt any of them cannot take is
        refused when the run starts."""
        missing = [c for c in params.model_chain if c.provider not in self.providers]
        if missing:
            names = ", ".join(sorted({c.provider for c in missing}))
            raise ValueError(
                f"no provider given for {names}; pass providers={{'{missing[0].provider}': ...}}"
            )
        if params.server_tools:  # the primary model's route must run them
            primary = params.model
            dialect = getattr(self.providers[primary.provider], "dialect", "")
            check_server_tools(params.server_tools, dialect, str(primary))
        self.machine = machine if isinstance(machine, CompiledMachine) else compile_spec(machine)
        self.clock = clock or SystemClock()
        self.token_counter = token_counter or TiktokenCounter()
        self.fallback_compactor: Compactor = TruncatingCompactor()
        self.compactor = compactor or self.fallback_compactor
        self.observers = tuple(observers)
        self.engine: Engine = engine
        self.tool_runner_factory = tool_runner_factory
        if isinstance(checkpointer, str | Path):
            checkpointer = open_checkpointer(checkpointer)
        self.checkpointer = checkpointer
        self.checkpoint_every: CheckpointEvery = checkpoint_every
        self.checkpoint_commit: CheckpointCommit = checkpoint_commit
        self.gates = gates if gates is not None else shared_gates()
        """The rate-limit gates (process-wide by default: runs share what a 429 taught)."""
        self._sync = _SyncLoop()
        self._abandoned: weakref.finalize[[], Any] | None = None
        """Closes the shared loop of a ``with`` block if the harness is collected inside
        it (made on entering the first block: a harness that never shares a loop has
        nothing to close)."""

    @functools.cached_property
    def record(self) -> MachineRecord:
        """What each run of this harness records of its machine (made when first needed:
        by a checkpointed run, or a resume)."""
        return MachineRecord.of(self.machine)

    def start(
        self,
        prompt: str | Message | None = None,
        *,
        state: HarnessState[OutputT] | None = None,
        tasks: Iterable[str] = (),
        start_at: str | None = None,
        run_id: str | None = None,
    ) -> Run[OutputT]:
        """A new run. ``prompt`` is appended as a user message to ``state``'s history.
        With a checkpointer, the run is recorded as ``run_id`` (a new id by default) and
        its first checkpoint is written now. ``max_turns`` and ``spend_budget`` count
        from ``state``'s counters (unless ``start_at`` continues a run mid-way).
        For a conversation, message after message, see :meth:`session`."""
        state = state if state is not None else HarnessState()
        if start_at is None:
            state.start_run()
        if prompt is not None:
            message = prompt if isinstance(prompt, Message) else Message.user(prompt)
            check_sendable([message], self._dialects)
            state.history.append(message)
        for i, text in enumerate(tasks, start=len(state.tasks) + 1):
            state.tasks.append(Task(f"t{i}", text))
        at = start_at or self.machine.initial
        writer = None
        if self.checkpointer is not None:
            run_id = uuid.uuid4().hex if run_id is None else run_id
            self.checkpointer.create_run(run_id, self.machine.name, record=self.record)
            writer = self._writer(run_id)
            writer.save(state, at)
        return self._run(state, at, run_id, writer)

    def _writer(self, run_id: str, last: Checkpoint | None = None) -> CheckpointWriter:
        assert self.checkpointer is not None
        if last is None:
            return CheckpointWriter(
                self.checkpointer,
                run_id,
                every=self.checkpoint_every,
                commit=self.checkpoint_commit,
            )
        info = last.info
        return CheckpointWriter(
            self.checkpointer,
            run_id,
            every=self.checkpoint_every,
            commit=self.checkpoint_commit,
            seq=info.seq,
            segment_start=info.history_start,
            segment=last.state.history,
        )

    def _run(
        self,
        state: HarnessState[OutputT],
        at: str,
        run_id: str | None,
        writer: CheckpointWriter | None,
        params: HarnessParams[OutputT] | None = None,
    ) -> Run[OutputT]:
        """A run of this harness (with ``params`` in place of its own: a session's run
        capped by its conversation's limits)."""
        return Run(
            self.machine,
            params or self.params,
            state,
            self.deps(),
            observers=self.observers,
            engine=self.engine,
            start_at=at,
            run_id=run_id,
            on_step=writer,
            settings=self.settings,
        )

    # -- checkpoints: resume, fork, list ---------------------------------------------------

    def _store(self, what: str) -> Checkpointer:
        if self.checkpointer is None:
            raise ResumeError(
                None,
                f"{what} by run id needs a checkpoint store; pass "
                "Harness(..., checkpointer='sqlite:///runs.db') (or a Checkpointer)",
            )
        return self.checkpointer

    def checkpoint(self, run_id: str, seq: int | None = None) -> Checkpoint[OutputT]:
        """Checkpoint ``seq`` of a stored run (its latest when None), read back (with
        ``state.output`` rebuilt from ``state.output_data`` by the params' output_type)."""
        checkpoint = decode(self._store("reading a checkpoint").rows(run_id, seq))
        spec, state = self.params.output_spec, checkpoint.state
        if spec is not None and state.output_data is not None:
            state.output = spec.rebuild(state.output_data)
        return checkpoint

    def checkpoints(self, run_id: str) -> list[CheckpointInfo]:
        """Every checkpoint of a stored run, oldest first: the ``seq`` of each is what
        :meth:`checkpoint` and ``fork(at=...)`` take, with the state the run entered and
        by which transition."""
        return self._store("listing checkpoints").checkpoints(run_id)

    def runs(self) -> list[RunInfo]:
        """Every stored run: status, exit reason, turns, cost; most recent first."""
        return self._store("listing runs").runs()

    def resume(
        self, run: Run[OutputT] | HarnessState[OutputT] | str, answer: Any = None
    ) -> Run[OutputT]:
        """Continue a run; returns a :class:`Run` to drive like one from :meth:`start`.

        ``run`` is a run id (from the store: after a suspend as after a crash, from its
        latest checkpoint), or a suspended ``Run`` or its state (in memory). A suspended
        run needs ``answer`` (see :class:`~innerloop.fsm.Interrupt`); a run that stopped
        mid-way takes none. :class:`~innerloop.ResumeError` says what does not fit, and
        nothing is written then.

        An answer is for one interrupt: an :class:`~innerloop.Answer` names it by id; a
        bare answer given with a ``Run`` is for the interrupt that run ended on, and one
        given with a run id or a state for the one interrupt it waits on (refused when
        more wait, as in a fan-out whose branches both asked). An answer for an
        interrupt the run no longer waits on is refused, and so is a second answer to one
        suspension of a stored run, whichever process comes second.

        Given a ``Run``, the new one keeps it as ``resumed_from``, so the tree of runs of
        the new one (:meth:`~innerloop.RunTree.of`) holds both stretches."""
        going_on = self._resume(run, answer)
        if isinstance(run, Run):
            going_on.resumed_from = run
        return going_on

    def _resume(
        self, run: Run[OutputT] | HarnessState[OutputT] | str, answer: Any = None
    ) -> Run[OutputT]:
        bound = run.asked.id if isinstance(run, Run) and run.asked is not None else None
        if isinstance(run, Run) and run.run_id is not None and self.checkpointer is not None:
            run = run.run_id
        if isinstance(run, str):
            store = self._store("resume")
            self._check_machine(store, run)
            last = self.checkpoint(run)
            self._check_state(run, last.state, last.info.state)
            asked = last.state.interrupt if last.state.final_state == "suspended" else None
            at, state = self._continue(run, last.info.state, last.state, answer, bound)
            if asked is not None:
                self._claim(store, run, asked, last.info.seq)
            return self._run(state, at, run, self._writer(run, last))
        if isinstance(run, Run) and not MachineRecord.of(run.machine).matches(self.machine):
            self._check_record(None, MachineRecord.of(run.machine))
        if isinstance(run, Run) and run.stopped_at is not None and run.state.final_state is None:
            return self._go_on(run.stopped_at, run.state, answer)
        state = run.state if isinstance(run, Run) else run
        self._check_state(None, state, state.final_state)
        at, state = self._continue(None, state.final_state, state, answer, bound)
        return self._run(state, at, None, None)

    @staticmethod
    def _claim(store: Checkpointer, run_id: str, asked: Interrupt, seq: int) -> None:
        """Take the suspension ``asked`` (checkpoint ``seq``) for this resume, once: the
        store's claim is atomic, so of two processes answering it one goes on."""
        key = asked.id or f"checkpoint {seq}"
        if not store.claim(run_id, key):
            raise ResumeError(
                run_id,
                f"its interrupt {key!r} was already answered by another resume (in this "
                "process or another); nothing was answered again. harness.checkpoint(run_id) "
                f"shows where the run is now; fork it (at={seq}) to answer that question anew",
            )

    def _go_on(self, stopped_at: str, state: HarnessState, answer: Any) -> Run:
        """A new Run for one whose events stopped being read at ``stopped_at``."""
        if answer is not None:
            raise ResumeError(
                None,
                f"it is not suspended (its reader left it in state {stopped_at!r}); resume "
                "it without an answer",
            )
        self._check_state(None, state, stopped_at)
        return self._run(state, resume_point(stopped_at), None, None)

    # -- what a resumed run needs of this harness -------------------------------------------

    def _check_machine(self, store: Checkpointer, run_id: str) -> None:
        """Refuse to go on with a stored run on another machine than the one it recorded."""
        record = store.machine(run_id)
        if record is not None and not record.matches(self.machine):
            self._check_record(run_id, record)

    def _check_record(self, run_id: str | None, record: MachineRecord) -> None:
        mine = self.record
        hint = recorded_hint(record.import_path)
        fix = (
            f"build the Harness with machine={hint} (it names that spec)"
            if hint != "MODULE:ATTR"
            else f"build the Harness with machine= the spec named {record.name[:200]!r}"
        )
        if record.name != mine.name:
            raise ResumeError(run_id, f"it ran on {record}, and this harness runs {mine}; {fix}")
        missing = record.missing_from(self.machine)
        if missing or record.signature is None:
            what = "; ".join(missing) if missing else "its states and edges differ"
            raise ResumeError(
                run_id,
                f"it ran on {record}, and this harness's machine {mine.name!r} (fingerprint "
                f"{mine.fingerprint}) lacks what it used: {what}; {fix}",
            )
        # a newer version of the same machine that keeps everything the run used: go on

    def _check_state(self, run_id: str | None, state: HarnessState, at: str | None) -> None:
        """The run's state exists in this machine, and every tool its history calls is
        one of the params' tools."""
        names = self.machine.spec.state_names
        interrupt = state.interrupt
        for where in (at, interrupt.state if interrupt is not None else None):
            if where is not None and where not in names:
                raise ResumeError(
                    run_id,
                    f"it stopped in state {where!r}, which machine {self.machine.name!r} does "
                    "not have; build the Harness with the machine the run used",
                )
        known = {t.name for t in self.params.tools}
        if self.params.final_result_tool:
            known.add(OUTPUT_TOOL)
        called = sorted({u.name for m in state.history for u in m.tool_uses} - known)
        if called:
            raise ResumeError(
                run_id,
                f"its history calls tool{'s' if len(called) > 1 else ''} "
                f"{', '.join(map(repr, called))}, which the params lack; build the params "
                "with the tools the run used (a model is refused a history that calls "
                "undeclared tools)",
            )

    def _continue(
        self,
        run_id: str | None,
        at: str | None,
        state: HarnessState[OutputT],
        answer: Any,
        bound: str | None = None,
    ) -> tuple[str, HarnessState[OutputT]]:
        """Where the run goes on and its state then (the answer recorded)."""
        if state.final_state == "suspended" or run_id is None or answer is not None:
            state.interrupt = check_answer(state, answer, run_id, self.params.max_json_depth, bound)
            at = state.interrupt.state
        elif state.final_state is not None:
            raise ResumeError(
                run_id,
                f"it finished ({state.final_state}); fork it from an earlier checkpoint "
                "to run again from there",
            )
        assert at is not None
        state.final_state = state.exit_reason = None
        return resume_point(at), state

    def fork(
        self,
        run_id: str,
        *,
        at: int | None = None,
        edit: Callable[[HarnessState[OutputT]], HarnessState[OutputT] | None] | None = None,
        answer: Any = None,
        new_run_id: str | None = None,
    ) -> Run[OutputT]:
        """A new run from checkpoint ``at`` of ``run_id`` (its latest when None); the
        parent is left as it is. ``edit(state)`` may change the state first (or return
        a new one). From a finished checkpoint the fork starts a new turn at the initial
        state, so ``edit`` must add a user message then."""
        store = self._store("fork")
        self._check_machine(store, run_id)
        parent = self.checkpoint(run_id, at)
        state = parent.state
        if edit is not None:
            state = edit(state) or state
        where = parent.info.state
        self._check_state(run_id, state, where)
        if state.final_state == "suspended":
            # refused before anything is written
            check_answer(state, answer, run_id, self.params.max_json_depth)
        if state.final_state is not None and state.final_state != "suspended":
            if not state.history or state.history[-1].role != "user":
                raise ResumeError(
                    run_id,
                    f"checkpoint {parent.info.seq} is final ({state.final_state}): a fork "
                    "from it starts a new turn, so edit= must end the history with a user "
                    "message",
                )
            state.final_state = state.exit_reason = None
            state.start_run()
            where = self.machine.initial
        child = uuid.uuid4().hex if new_run_id is None else new_run_id
        store.create_run(
            child,
            self.machine.name,
            parent_run_id=run_id,
            parent_seq=parent.info.seq,
            record=self.record,
        )
        self._writer(child).save(state, where)
        return self.resume(child, answer)

    def deps(self) -> Deps:
        """The services of a new run (its own token cache and tool executor)."""
        return Deps(
            providers=self.providers,
            clock=self.clock,
            tokens=MessageTokenCache(self.token_counter),
            compactor=self.compactor,
            fallback_compactor=self.fallback_compactor,
            tools=self.tool_runner_factory(),
            gates=self.gates,
        )

    async def run(
        self, prompt: str | Message | None = None, **kwargs: object
    ) -> HarnessState[OutputT]:
        """Run to the end; returns the final state."""
        return await self.start(prompt, **kwargs).run()  # type: ignore[arg-type]

    def run_sync(
        self,
        prompt: str | Message | None = None,
        *,
        on_event: Callable[[RunEvent], None] | None = None,
        **kwargs: object,
    ) -> HarnessState[OutputT]:
        """The sync facade: drives the async run on a private event loop (one per call;
        inside ``with harness:``, one for the block). ``on_event`` sees each event. It
        raises inside a running event loop: there, ``await harness.run(...)``."""
        return self._drive_sync(
            lambda: self.start(prompt, **kwargs),  # type: ignore[arg-type]
            on_event,
            "run_sync",
            "which it would block; in async code use `await harness.run(...)` instead",
        )

    def _drive_sync(
        self,
        make: Callable[[], Run[OutputT]],
        on_event: Callable[[RunEvent], None] | None,
        call: str,
        fix: str,
    ) -> HarnessState[OutputT]:
        """Drive the run ``make()`` returns on the sync facade's loop (refused inside a
        running event loop: ``call`` and ``fix`` say so)."""
        _outside_a_loop(call, fix)

        async def drive() -> HarnessState[OutputT]:
            run = make()
            async for event in run.events():
                if on_event is not None:
                    on_event(event)
            return run.state

        return self._sync.run(drive)

    def session(
        self,
        conversation_id: str | None = None,
        *,
        max_turns_total: int | None = None,
        spend_budget_total: SpendBudget | None = None,
    ) -> Session:
        """A conversation, message after message (see :class:`~innerloop.Session`): a new
        one when ``conversation_id`` is None or not in the store, else the stored one
        going on. ``max_turns`` and ``spend_budget`` apply to each message;
        ``max_turns_total`` and ``spend_budget_total`` to the whole conversation."""
        return Session(
            self,
            conversation_id,
            max_turns_total=max_turns_total,
            spend_budget_total=spend_budget_total,
        )

    def close(self) -> None:
        """End the ``with`` block's shared event loop, if one was made: the SDK clients the
        providers built are closed, the connections opened on it too (a client given as
        ``client=`` stays open, for its owner). Idempotent; later ``run_sync`` calls get
        a loop each again."""
        if self._sync.runner is not None:
            _outside_a_loop(
                "close()",
                "which it would block while its own loop closes; call it outside, or "
                "`await asyncio.to_thread(harness.close)`",
            )
        self._sync.close()

    def __enter__(self) -> Self:
        """Share one event loop between the ``run_sync`` calls of the block."""
        self._sync.open()
        if self._abandoned is None:
            self._abandoned = weakref.finalize(self, self._sync.abandoned)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
