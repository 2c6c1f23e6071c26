"""Machines inside machines: a child run inside a parent run.

One primitive, :class:`ChildRun`, runs a :class:`Child` (its own params, machine and
providers) on an input built from the parent's state, inside a parent handler or tool:

- its events stream through the parent's ``events()``, each wrapped in a
  :class:`~innerloop.events.ChildEvent` carrying the child's path (``research/web#2``);
- its usage and cost are added to the parent's as each of its model answers arrives, its
  spend budget is lowered to what the parent's has left, and a child that takes the
  parent past its budget is aborted, so a budget holds per child and in total;
- the child runs in a task of its own: an abort of the parent (or a timeout of the agent
  tool, or the parent's reader leaving) aborts the child, which ends in ``aborted`` with
  a valid history, before the parent goes on to its own abort.

- its model turns count in the parent's ``state.turns``, and it is given at most the
  turns the parent has left, so the parent's ``max_turns`` bounds the total;
- its run is kept in the parent's ``notes["children.runs"]`` (by path) when it suspends,
  when the parent's reader leaves, and, with a checkpoint store, at each of its
  transitions (each writing a checkpoint of the parent): a parent resumed (with the
  answer to a child's question, or from a checkpoint) continues each child there.

Built on it: :func:`child_handler` (a machine as a state), :func:`fan_out_handler` (N
children over a list), :func:`handoff_handler` (the conversation handed to another
agent), and :func:`innerloop.fsm.agent_tool` (a child as a tool the model calls).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Container,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from typing import Any, Generic

import attrs

from innerloop import _convert
from innerloop._errors import SpecError
from innerloop._events import ChildEvent, Event, ModelResponseEvent
from innerloop._history import History
from innerloop._messages import Message, TextBlock, Usage
from innerloop.fsm._compile import CompiledMachine, compile_spec
from innerloop.fsm._context import Deps, Mailbox, Nest, PhaseContext, relay, request_settings
from innerloop.fsm._default import DEFAULT_SPEC
from innerloop.fsm._driver import Run, resume_point
from innerloop.fsm._guardinfo import guard
from innerloop.fsm._guards import interrupted, spend_exceeded, turn_limit
from innerloop.fsm._interrupts import CHILD_RUNS, deliver_answer
from innerloop.fsm._output import OutputT
from innerloop.fsm._params import HarnessParams, SpendBudget
from innerloop.fsm._spec import Guard, Handler, MachineSpec, StateSpec, TransitionSpec
from innerloop.fsm._state import HarnessState, Interrupt, OutcomeEnum
from innerloop.providers._base import Provider
from innerloop.providers._normalize import RequestSettings
from innerloop.recovery._tokens import MessageTokenCache
from innerloop.tools._runner import ToolRunner
from innerloop.tools._spec import ToolContext, ToolError, ToolInterrupt, ToolOutput, ToolSpec

__all__ = [
    "CHILD_GUARDS",
    "Child",
    "ChildOutcome",
    "ChildRun",
    "ChildSnapshot",
    "agent_tool",
    "child_handler",
    "child_result",
    "child_transitions",
    "fan_out_handler",
    "handoff_handler",
    "snapshot",
    "states_taken",
    "with_child_state",
]

_ANSWERS: frozenset[type[Event]] = frozenset({ModelResponseEvent})
"""What a child run nobody reads still hands up: its answers, to roll its spending up."""

SUCCESS: tuple[str, ...] = ("model_complete", "tasks_complete")
"""The child's final states that count as success by default."""
NOTES = "children"
"""``state.notes`` key: per child state, what its child (or children) ended with (exit
reason, output, turns, machine name)."""


def last_user_text(state: HarnessState) -> str:
    """The text of the parent's last user message (a child's default input)."""
    for message in reversed(state.history):
        if message.role == "user" and message.text:
            return message.text
    return ""


def _names(value: Iterable[str]) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


def _compiled(value: MachineSpec | CompiledMachine) -> CompiledMachine:
    return value if isinstance(value, CompiledMachine) else compile_spec(value)


@attrs.frozen
class Child(Generic[OutputT]):
    """A child machine: what a parent run runs inside a state, a fan-out or a tool.

    ``name`` is its segment of the event path; ``params`` its own (models, tools,
    limits, ``output_type``); ``machine`` its spec (compiled, and so checked, here);
    ``prompt`` builds its input from the parent's state (default: the text of the
    parent's last user message); ``providers`` its own (default: the parent's);
    ``success`` the final states of the child that count as success."""

    name: str
    params: HarnessParams[OutputT]
    machine: MachineSpec | CompiledMachine = DEFAULT_SPEC
    compiled: CompiledMachine = attrs.field(
        init=False, default=attrs.Factory(lambda self: _compiled(self.machine), takes_self=True)
    )
    """``machine`` compiled (and so checked) when the child is made."""
    settings: RequestSettings = attrs.field(
        init=False,
        default=attrs.Factory(lambda self: request_settings(self.params), takes_self=True),
        repr=False,
    )
    """What each request of its runs carries besides the history (built once)."""
    prompt: Callable[[HarnessState], str | Message] = last_user_text
    providers: Mapping[str, Provider] | None = None
    success: tuple[str, ...] = attrs.field(default=SUCCESS, converter=_names)

    def __attrs_post_init__(self) -> None:
        unknown = [s for s in self.success if s not in self.compiled.finals]
        if unknown or not self.name or "/" in self.name or "#" in self.name:
            what = (
                f"success names {unknown}, which are not final states of machine "
                f"{self.compiled.name!r} (its final states: {sorted(self.compiled.finals)})"
                if unknown
                else f"name {self.name!r} must be non-empty without '/' or '#' (they "
                "separate the levels of an event path)"
            )
            raise SpecError("child", f"child {self.name!r}: {what}", ())


def _capped(params: HarnessParams[OutputT], parent: PhaseContext) -> HarnessParams[OutputT]:
    """``params`` with the spend budget lowered to what the parent's has left."""
    budget = parent.params.spend_budget
    if budget is None:
        return params
    state, own = parent.state, params.spend_budget or SpendBudget()
    tokens, cost = own.max_tokens, own.max_cost_usd
    if budget.max_tokens is not None:
        left = budget.max_tokens - (state.usage.total_tokens - state.tokens_at_start)
        tokens = max(1, min(left, tokens) if tokens is not None else left)
    if budget.max_cost_usd is not None and state.cost_usd is not None:
        spent = budget.max_cost_usd - (state.cost_usd - state.cost_at_start)
        left_usd = max(spent, 1e-9)
        cost = min(left_usd, cost) if cost is not None else left_usd
    return params.evolve(spend_budget=SpendBudget(tokens, cost))


def _turns_left(parent: PhaseContext) -> int:
    """The model turns the parent has left (its own and its children's count)."""
    state = parent.state
    return parent.params.max_turns - (state.turns - state.turns_at_start)


def _give_turns_left(state: HarnessState[Any], own: int, parent: PhaseContext) -> None:
    """Let a new child run (``state``, limited to ``own`` turns) take at most the turns
    its parent has left: its turn count starts with the difference already spent, so
    its own ``turn_limit`` ends it (``max_turns_exceeded``) at the parent's limit."""
    left = _turns_left(parent)
    if left < own:
        state.turns_at_start -= own - max(left, 0)


def _minus(a: Usage, b: Usage) -> Usage:
    return Usage(
        a.input_tokens - b.input_tokens,
        a.output_tokens - b.output_tokens,
        a.cache_read_tokens - b.cache_read_tokens,
        a.cache_creation_tokens - b.cache_creation_tokens,
        a.thinking_tokens - b.thinking_tokens,
        a.estimated,
    )


@contextlib.contextmanager
def _delegated(parent: PhaseContext, abort: Callable[[], None]) -> Iterator[None]:
    """While children run inside ``parent``'s handler: an abort of the parent calls
    ``abort`` (which aborts them) instead of cancelling the handler (``scope.delegate``),
    and the parent's driver reads on (``scope.reporting``) until they have ended."""
    scope = parent.scope
    scope.delegate, scope.reporting = abort, True
    try:
        yield
    finally:
        scope.delegate, scope.reporting = None, False


class ChildRun(Generic[OutputT]):
    """One run of a :class:`Child` inside the run ``parent`` (a handler's or a tool's
    ``PhaseContext``), on ``prompt`` (or, for a handoff, on ``state``). Read its events
    once with :meth:`events`; :attr:`state` is the child's state."""

    def __init__(
        self,
        parent: PhaseContext,
        child: Child[OutputT],
        prompt: str | Message | None,
        *,
        path: str | None = None,
        state: HarnessState[OutputT] | None = None,
        start_at: str | None = None,
    ) -> None:
        self.parent = parent
        self.child = child
        self.path = path or child.name
        deps = parent.deps
        state = state if state is not None else HarnessState()
        if start_at is None:  # a new run of the child (not one going on after an answer)
            state.start_run()
            _give_turns_left(state, child.params.max_turns, parent)
        if prompt is not None:
            state.history.append(prompt if isinstance(prompt, Message) else Message.user(prompt))
        own = Deps(
            providers=child.providers if child.providers is not None else deps.providers,
            clock=deps.clock,
            tokens=MessageTokenCache(deps.tokens.counter),
            compactor=deps.compactor,
            fallback_compactor=deps.fallback_compactor,
            tools=ToolRunner(),
            gates=deps.gates,
        )
        self.run: Run[OutputT] = Run(
            child.compiled,
            _capped(child.params, parent),
            state,
            own if deps.nest is None else deps.nest(own, child, self.path),
            observers=parent.scope.observers,
            settings=child.settings,
            start_at=start_at,
        )
        self.run.scope.quiet = parent.scope.quiet
        self.run.scope.nest = Nest(parent, child.name, self.path)  # its place in the tree
        scope = parent.scope
        if scope.children is None:
            scope.children = []
        self._place = len(scope.children)
        scope.children.append(self.run)  # the tree of a live run (RunTree.of)
        if parent.scope.nested_step is not None:  # the parent's checkpoints keep children
            self.run.on_step = self._stepped
            self.run.scope.nested_step = self._nested
        self._usage = state.usage
        self._turns = state.turns
        self._cost = state.cost_usd or 0.0
        self._box = Mailbox()

    @property
    def state(self) -> HarnessState[OutputT]:
        return self.run.state

    @property
    def succeeded(self) -> bool:
        return self.run.state.final_state in self.child.success

    def abort(self, reason: str) -> None:
        self.run.abort(reason)

    def _stepped(self, run: Run[Any], transition: TransitionSpec) -> Awaitable[None] | None:
        """The child's step hook: save it in the parent's notes, checkpoint the parent."""
        return self._nested(run.machine, transition)

    def _nested(self, machine: CompiledMachine, taken: TransitionSpec) -> Awaitable[None] | None:
        """After a step of this child (or of one of its own children, already saved in
        its notes): save it in the parent's notes and checkpoint the parent."""
        _keep(self.parent, self)
        nested = self.parent.scope.nested_step
        assert nested is not None
        return nested(machine, taken)

    def _rolled_up(self, event: Event) -> None:
        """:meth:`_roll_up` at each answer of a child run nobody reads."""
        self._roll_up()

    def _roll_up(self) -> None:
        """Add what the child spent since the last call (usage, cost, model turns) to the
        parent's totals; abort the child when the parent's spend budget is spent, or when
        the parent has gone past its ``max_turns`` (children side by side)."""
        state, parent = self.run.state, self.parent.state
        if state.turns != self._turns:
            parent.turns += state.turns - self._turns
            self._turns = state.turns
        if state.usage != self._usage:
            parent.usage = parent.usage + _minus(state.usage, self._usage)
            self._usage = state.usage
        cost = state.cost_usd
        if cost is None:
            parent.cost_usd = None
        elif cost != self._cost:
            if parent.cost_usd is not None:
                parent.cost_usd += cost - self._cost
            self._cost = cost
        if (
            state.final_state is None
            and spend_exceeded(self.parent)
            and not spend_exceeded(self.run.ctx)  # else its own check ends it first
        ):
            self.run.abort(f"the parent's spend budget is spent (child {self.path!r})")
        elif (
            state.final_state is None
            and _turns_left(self.parent) < 0
            and not turn_limit(self.run.ctx)  # else its own check ends it first
        ):
            self.run.abort(f"the parent's max_turns is spent (child {self.path!r})")

    async def _passed_up(self) -> AsyncGenerator[ChildEvent, None]:
        """Run the child in this task, yielding its events wrapped with their path
        (none when nobody reads or watches the parent's), rolling its spending up."""
        path, forward = self.path, self.parent.scope.forward
        if self.run.state.final_state is not None:  # saved when it ended: not run again
            self._release()
            return
        try:
            if not forward:  # nobody reads or watches the parent's events: none are made
                await self.run._run_watching(self._rolled_up, _ANSWERS)
                return
            async with contextlib.aclosing(self.run.events()) as events:
                async for event in events:
                    if type(event) is ModelResponseEvent:
                        self._roll_up()
                    if not forward:  # nobody reads or watches the parent's events
                        continue
                    if type(event) is ChildEvent:  # a grandchild's: one event, the whole path
                        yield ChildEvent(f"{path}/{event.path}", event.event)
                    else:
                        yield ChildEvent(path, event)
        finally:
            self._roll_up()
            if self.run.stopped_at is not None:  # the parent's reader left: it goes on here
                _keep(self.parent, self)
            self._release()

    def _release(self) -> None:
        """Once the child's run has ended (suspended too): its parent keeps what the tree
        of a live run shows of it, a :class:`ChildSnapshot`, in place of the ``Run``, so
        the ended run (its history, tools, requests, its own children) can be freed."""
        children = self.parent.scope.children
        if self.run.state.final_state is not None and children is not None:
            if children[self._place] is self.run:
                children[self._place] = snapshot(self.run)

    async def _pump(self) -> None:
        async with contextlib.aclosing(self._passed_up()) as events:
            async for event in events:
                self._box.put(event)

    def inline(self) -> AsyncGenerator[ChildEvent, None]:
        """Run the child in the parent handler's own task, yielding its events as
        :class:`ChildEvent` (cheaper than :meth:`events`: no task, no hand-over); read
        it inside :meth:`delegated`."""
        return self._passed_up()

    def delegated(self) -> contextlib.AbstractContextManager[None]:
        """While the child runs :meth:`inline`: an abort of the parent is handed to the
        child instead of cancelling the handler, and the parent's driver reads on until
        the child has ended, validly, in ``aborted``."""
        return _delegated(self.parent, self._abort_from_parent)

    def _abort_from_parent(self) -> None:
        asked = self.parent.state.abort
        reason = asked.reason if asked is not None else "the parent was aborted"
        self.run.abort(f"the parent of child {self.path!r} was aborted: {reason}")

    async def events(self) -> AsyncGenerator[ChildEvent, None]:
        """Run the child to its end in a task of its own, yielding its events as
        :class:`ChildEvent`. Cancelled or closed early, it aborts the child and waits
        for it to end (validly) before the cancellation goes on."""
        task = asyncio.ensure_future(self._pump())
        try:
            async with contextlib.aclosing(relay(self._box, task)) as relayed:
                async for event in relayed:
                    yield event
        finally:
            if not task.done():
                self.run.abort(f"the parent of child {self.path!r} stopped it")
                await asyncio.wait([task])
                # its last events (the abort, ``finished``): the parent's driver yields them
                # after the step that stopped it
                for event in self._box.take():
                    self.parent.emit(event)
        task.result()  # a programmer error in the child's machine is raised here

    async def run_to_end(self, emit: Callable[[Event], None]) -> HarnessState[OutputT]:
        """Run the child, handing each event to ``emit``."""
        async with contextlib.aclosing(self.events()) as events:
            async for event in events:
                emit(event)
        return self.run.state


@attrs.frozen
class ChildSnapshot:
    """A child run as the tree of a live run (:meth:`~innerloop.RunTree.of`) shows it:
    its path, machine, the states it took, how it ended and its totals, and its own
    children's; plain data, holding no run."""

    path: str
    machine: str
    taken: tuple[str, ...]
    """Its start, then each transition's target (empty when it took none)."""
    final_state: str | None
    exit_reason: str | None
    turns: int
    usage: Usage
    cost_usd: float | None
    interrupt: Interrupt | None
    children: tuple[ChildSnapshot, ...]


def states_taken(path: Sequence[TransitionSpec]) -> tuple[str, ...]:
    """The states a run's ``path`` (its transitions) went through: its start, then each
    transition's target; none when it took no transition."""
    return (path[0].source, *(t.target for t in path)) if path else ()


def snapshot(run: Run[Any] | ChildSnapshot) -> ChildSnapshot:
    """What the tree of a live run shows of the child run ``run`` now (its children's
    ended runs as their parent kept them, the others as they stand); a child that has
    ended is its parent's snapshot of it already."""
    if isinstance(run, ChildSnapshot):
        return run
    nest, state = run.scope.nest, run.state
    return ChildSnapshot(
        nest.path if nest is not None else "?",
        run.machine.name,
        states_taken(run.path),
        state.final_state,
        state.exit_reason,
        state.turns,
        state.usage,
        state.cost_usd,
        state.interrupt,
        tuple(snapshot(c) for c in run.scope.children or ()),
    )


def child_result(state: HarnessState) -> Any:
    """What a child answered: its typed output's data when it has an ``output_type``,
    else the text of its last assistant message."""
    if state.output_data is not None:
        return state.output_data
    for message in reversed(state.history):
        if message.role == "assistant":
            return message.text
    return ""


def _result_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


class ChildOutcome(OutcomeEnum):
    """What a child state's handler records: its child (all of them, for a fan-out)
    ended in a success state, or not."""

    SUCCEEDED = "child_succeeded"
    FAILED = "child_failed"


@guard(reads=("state.outcome",))
def child_succeeded(ctx: PhaseContext) -> bool:
    """The child (every child of a fan-out) ended in one of its success states."""
    return ctx.state.outcome == ChildOutcome.SUCCEEDED


CHILD_GUARDS: Mapping[str, Guard] = {"child_succeeded": child_succeeded}
"""The guard a child state's edges use (``with_child_state`` adds it to the spec)."""


def _tell(history: list[Message], text: str) -> None:
    """Add ``text`` for the parent's model as a user turn: a block of the last message
    when that is a user message (roles keep alternating), else a message of its own."""
    block = TextBlock(text)
    if history and history[-1].role == "user":
        history[-1] = Message("user", (*history[-1].content, block))
    else:
        history.append(Message("user", (block,)))


def _ended(run: ChildRun[Any]) -> dict[str, Any]:
    """What the parent notes of a child run that ended (``notes["children"]``): its exit
    reason, answer and turns, and its machine's name (what a stored run's list of
    children shows, as a log's ``run_started`` names it)."""
    state = run.state
    return {
        "exit_reason": state.exit_reason,
        "output": child_result(state),
        "turns": state.turns,
        "machine": run.run.machine.name,
    }


def _record(ctx: PhaseContext, name: str | None, runs: Sequence[ChildRun[Any]], many: bool) -> None:
    """Note what the children ended with (under ``name``: one record, or with ``many``
    a list; with no ``name``, each under its own child's name), tell the parent's model
    their answers in one user message (in order), and record the outcome."""
    ended = [_ended(r) for r in runs]
    notes = ctx.state.notes.setdefault(NOTES, {})
    if name is None:
        notes.update((r.child.name, e) for r, e in zip(runs, ended, strict=True))
    else:
        notes[name] = ended if many else ended[0]
    ok = all(r.succeeded for r in runs)
    if ok:
        lines = [
            f"[{r.path}] {_result_text(e['output'])}" for r, e in zip(runs, ended, strict=True)
        ]
        _tell(ctx.state.history, "\n".join(lines))
    ctx.state.outcome = ChildOutcome.SUCCEEDED if ok else ChildOutcome.FAILED


def _joined(path: str, below: str) -> str:
    return f"{path}/{below}" if below else path


def _asking(runs: Sequence[ChildRun[Any]]) -> ChildRun[Any] | None:
    """The first of ``runs`` (in order) that ended suspended, waiting for an answer."""
    for run in runs:
        if run.state.final_state == "suspended" and run.state.interrupt is not None:
            return run
    return None


def _keep(ctx: PhaseContext, run: ChildRun[Any]) -> None:
    """Save ``run`` (its state, and where it goes on) in the parent's notes, by path,
    with its machine's name and the states this stretch of it took (what
    ``RunTree.from_store`` reads)."""
    child = run.run
    saved = {
        "at": resume_point(child.current),
        "state": _convert.unstructure(run.state),
        "machine": child.machine.name,
        "taken": [*states_taken(child.path)] or [child.current],
    }
    ctx.state.notes.setdefault(CHILD_RUNS, {})[run.path] = saved


def _forget(ctx: PhaseContext, runs: Sequence[ChildRun[Any]]) -> None:
    """Drop the saved ``runs`` from the parent's notes (they ended and were recorded)."""
    notes = ctx.state.notes
    saved = notes.get(CHILD_RUNS)
    if saved is None:
        return
    for run in runs:
        saved.pop(run.path, None)
    if not saved:
        del notes[CHILD_RUNS]


def _suspends(ctx: PhaseContext, runs: Sequence[ChildRun[Any]]) -> bool:
    """When one of ``runs`` ended suspended (an approval, a question): save them all in
    the parent's notes and suspend the parent on the first one's question (one question
    at a time; the next asks once it is answered); True then."""
    run = _asking(runs)
    if run is None:
        return False
    for each in runs:
        _keep(ctx, each)
    asked = run.state.interrupt
    assert asked is not None
    path = _joined(run.path, asked.path)
    ctx.interrupt(asked.kind, asked.payload, tool_use_ids=asked.tool_use_ids, path=path)
    return True


def _answered(ctx: PhaseContext) -> None:
    """When the parent was resumed here with an answer: hand it to the child that asked."""
    answered = ctx.resumed
    if answered is not None:
        deliver_answer(ctx.state, answered)


def _continued(
    ctx: PhaseContext, child: Child[OutputT], path: str, prompt: str | Message | None
) -> ChildRun[OutputT]:
    """The run of ``child`` at ``path``: the one saved in the parent's notes going on
    (an answered one from the state that asked, with the answer; one that had ended, or
    waits for another answer, as it is: it does not run again), else a new one on
    ``prompt``."""
    saved = ctx.state.notes.get(CHILD_RUNS, {}).get(path)
    if saved is None:
        return ChildRun(ctx, child, prompt, path=path)
    state: HarnessState[OutputT] = _convert.structure(saved["state"], HarnessState)
    at: str = saved["at"]
    asked = state.interrupt
    if "answer" in saved and state.final_state == "suspended" and asked is not None:
        state.interrupt = attrs.evolve(asked, answered=True, answer=saved.pop("answer"))
        state.final_state = state.exit_reason = None
        at = asked.state
    return ChildRun(ctx, child, None, path=path, state=state, start_at=at)


def child_handler(child: Child[Any]) -> Handler:
    """The phase handler of a state that runs ``child`` (a machine as a state): its
    input is ``child.prompt(parent state)``; its answer goes to the parent's history as a
    user message (``[name] answer``) and to ``state.notes["children"][name]``; the
    outcome is ``child_succeeded`` or ``child_failed``."""

    async def run_child(ctx: PhaseContext) -> AsyncIterator[Event]:
        _answered(ctx)
        run = _continued(ctx, child, child.name, child.prompt(ctx.state))
        with run.delegated():
            async with contextlib.aclosing(run.inline()) as events:
                async for event in events:
                    yield event
        if not _suspends(ctx, [run]):
            _forget(ctx, [run])
            _record(ctx, child.name, [run], many=False)

    run_child.__qualname__ = f"child_handler.<{child.name}>"
    run_child.child = child  # type: ignore[attr-defined]  # drawn inside its state
    run_child.suspends = True  # type: ignore[attr-defined]
    return run_child


Job = tuple[Child[Any], str, str | Message]
"""One branch of a fan-out: the child, its path and its input."""


async def _branches(
    ctx: PhaseContext,
    jobs: Sequence[Job],
    limit: int,
    started: dict[int, ChildRun[Any]],
) -> AsyncGenerator[Event, None]:
    """Run each job's child on its input at its path, ``limit`` at a time, yielding
    their events as they come; ``started`` gets each branch's run as it starts. An
    abort of the parent aborts each running branch (a branch not yet started is not
    started), and their events are read on until every branch has ended."""
    gate = asyncio.Semaphore(limit)
    queue: asyncio.Queue[Event | None] = asyncio.Queue()

    async def one(i: int, child: Child[Any], path: str, prompt: str | Message) -> None:
        async with gate:
            try:  # made when it starts: its limits are what the parent has left then
                if ctx.state.abort is None:
                    run = started[i] = _continued(ctx, child, path, prompt)
                    await run.run_to_end(queue.put_nowait)
            finally:
                queue.put_nowait(None)

    def abort_branches() -> None:
        for run in list(started.values()):
            run._abort_from_parent()

    tasks = [asyncio.ensure_future(one(i, *job)) for i, job in enumerate(jobs, 1)]
    try:
        with _delegated(ctx, abort_branches):
            left = len(tasks)
            while left:
                event = await queue.get()
                if event is None:
                    left -= 1
                else:
                    yield event
    finally:
        running = [r for r in started.values() if r.state.final_state is None]
        for t in tasks:
            t.cancel()  # each aborts its child and waits for it to end
        if tasks:
            await asyncio.wait(tasks)
        _forget(ctx, running)  # stopped (an abort, or the reader left): run anew
    for t in tasks:
        t.result()


def _fan_out_children(child: Child[Any] | Sequence[Child[Any]]) -> tuple[Child[Any], ...]:
    """The children of a fan-out over several (each a ``Child``, of distinct names)."""
    if isinstance(child, Child):
        return (child,)
    listed = isinstance(child, Iterable) and not isinstance(child, str | bytes | Mapping)
    children = tuple(child) if listed else ()
    wrong = [c for c in children if not isinstance(c, Child)]
    if not children or wrong:
        got = f"{type(wrong[0]).__name__} {wrong[0]!r:.60}" if wrong else repr(child)[:60]
        raise TypeError(
            f"fan_out_handler takes a Child (run once per input of items) or a non-empty "
            f"list of Child (each run once, side by side); got {got}"
        )
    names = [c.name for c in children]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(
            f"fan_out_handler({names}): two children named {twice[0]!r}; each child of a "
            "fan-out needs a name of its own (it is the child's path and its key in "
            "notes['children'])"
        )
    return children


def fan_out_handler(
    child: Child[Any] | Sequence[Child[Any]],
    items: Callable[[HarnessState], Sequence[str | Message]] | None = None,
    *,
    limit: int = 4,
) -> Handler:
    """The phase handler of a state that runs several children side by side, at most
    ``limit`` at a time, in one of two forms:

    - one ``child`` once per input of ``items(parent state)``, as ``name#1``,
      ``name#2``, ...; ``notes["children"][name]`` is a list, in input order;
    - a list of different children (each its own params, tools, models, prompt and
      machine), each once, as its own name, on ``child.prompt(parent state)`` (or, with
      ``items``, on the input at its place: one per child); ``notes["children"][name]``
      for each.

    The answers join in order (one user message, a line each). One child that does not
    succeed makes the outcome ``child_failed`` (the others run to their end). Their
    tokens, cost and turns count against the parent's limits, each child starting with
    what the parent has left. An abort of the parent aborts every running child (one
    not yet started is not started); each ends, validly, in ``aborted`` and its last
    events reach the parent's stream before the parent takes its abort edge.

    A branch that asks (an approval, a question) suspends the parent once every branch
    has ended or asked, on the first question in order; resumed, the branches that
    ended keep their results, the one asked goes on with the answer, and the parent
    suspends again on the next question while one is left."""
    children = _fan_out_children(child)
    one = children[0] if isinstance(child, Child) else None
    label = repr(one.name) if one is not None else repr([c.name for c in children])
    if limit < 1:
        raise ValueError(f"fan_out_handler({label}): limit must be at least 1, not {limit}")
    if one is not None and items is None:
        raise TypeError(
            f"fan_out_handler({label}): one child runs once per input of items(state); "
            "pass items=, or a list of children to run each once"
        )

    def jobs(state: HarnessState) -> list[Job]:
        if one is not None:
            assert items is not None
            inputs = _fan_out_inputs(label, items(state))
            return [(one, f"{one.name}#{i}", p) for i, p in enumerate(inputs, 1)]
        if items is None:
            return [(c, c.name, c.prompt(state)) for c in children]
        inputs = _fan_out_inputs(label, items(state))
        if len(inputs) != len(children):
            raise ValueError(
                f"fan_out_handler({label}): items(state) gave {len(inputs)} inputs for "
                f"{len(children)} children; give one input per child, in their order"
            )
        return [(c, c.name, p) for c, p in zip(children, inputs, strict=True)]

    async def fan_out(ctx: PhaseContext) -> AsyncIterator[Event]:
        _answered(ctx)
        started: dict[int, ChildRun[Any]] = {}
        async with contextlib.aclosing(_branches(ctx, jobs(ctx.state), limit, started)) as events:
            async for event in events:
                yield event
        runs = [started[i] for i in sorted(started)]
        if not _suspends(ctx, runs):
            _forget(ctx, runs)
            _record(ctx, one.name if one is not None else None, runs, many=True)

    fan_out.__qualname__ = f"fan_out_handler.<{'+'.join(c.name for c in children)}>"
    fan_out.child = children[0]  # type: ignore[attr-defined]  # drawn inside its state
    fan_out.children = children  # type: ignore[attr-defined]  # what a durable worker runs
    fan_out.suspends = True  # type: ignore[attr-defined]
    return fan_out


def _fan_out_inputs(label: str, got: object) -> list[str | Message]:
    """What a fan-out's ``items(state)`` returned, checked: a sequence of inputs, each a
    ``str`` or a ``Message`` (a TypeError naming the first that is not)."""
    expected = "a list of inputs, each a str (the task) or a Message"
    if isinstance(got, str | bytes | Mapping) or not isinstance(got, Iterable):
        raise TypeError(
            f"fan_out_handler({label}): items(state) must return {expected}; got "
            f"{type(got).__name__} {got!r:.60}"
        )
    inputs = list(got)
    for i, item in enumerate(inputs, start=1):
        if not isinstance(item, str | Message):
            raise TypeError(
                f"fan_out_handler({label}): items(state) must return {expected}; input {i} "
                f"is {type(item).__name__} {item!r:.60}"
            )
    return inputs


HANDOFF_NOTE = "You take this conversation over from here; answer the user."
"""The user turn a handoff adds when the conversation ends with an assistant message."""


def handoff_handler(child: Child[Any], note: str = HANDOFF_NOTE) -> Handler:
    """The phase handler of a handoff: ``child`` (another agent: its params, tools and
    machine) takes over the parent's conversation, its history a copy of the parent's;
    when it ends, its history (with its answers) becomes the parent's, and so do its
    typed output and its final state (in ``notes["children"][name]``). One canonical
    history serves both agents, whatever their providers. When the conversation ends
    with an assistant message, ``note`` is added as a user turn for the new agent."""

    async def hand_off(ctx: PhaseContext) -> AsyncIterator[Event]:
        parent = ctx.state
        _answered(ctx)
        if child.name in parent.notes.get(CHILD_RUNS, {}):
            run = _continued(ctx, child, child.name, None)
        else:
            fresh: HarnessState[Any] = HarnessState(history=History(parent.history))
            if not fresh.history or fresh.history[-1].role == "assistant":
                _tell(fresh.history, note)
            run = ChildRun(ctx, child, None, state=fresh)
        with run.delegated():
            async with contextlib.aclosing(run.inline()) as events:
                async for event in events:
                    yield event
        if _suspends(ctx, [run]):
            return
        _forget(ctx, [run])
        state = run.state
        parent.history[:] = state.history
        parent.output_data = state.output_data
        parent.output = state.output
        parent.notes.setdefault(NOTES, {})[child.name] = _ended(run)
        parent.outcome = ChildOutcome.SUCCEEDED if run.succeeded else ChildOutcome.FAILED

    hand_off.__qualname__ = f"handoff_handler.<{child.name}>"
    hand_off.child = child  # type: ignore[attr-defined]  # drawn inside its state
    hand_off.suspends = True  # type: ignore[attr-defined]
    return hand_off


def child_transitions(
    state: str,
    target: str,
    on_failure: str,
    *,
    finals: Container[str] = (),
    suspends: bool = False,
) -> tuple[TransitionSpec, ...]:
    """The edges out of a child state: ``abort [abort_requested]`` (an abort of the
    parent, which also aborted the child), with ``suspends`` ``suspended
    [interrupted]`` (the child waits for an answer, and so does the parent),
    ``target [child_succeeded]``, and ``on_failure`` for every other way the child
    ended (an edge into one of ``finals`` is drawn as an exit)."""
    suspend = (TransitionSpec(state, "suspended", "interrupted", "exit"),) if suspends else ()
    return (
        TransitionSpec(state, "abort", "abort_requested", "recovery"),
        *suspend,
        TransitionSpec(state, target, "child_succeeded", "exit" if target in finals else "happy"),
        TransitionSpec(state, on_failure, None, "exit" if on_failure in finals else "recovery"),
    )


def with_child_state(
    spec: MachineSpec,
    state: StateSpec,
    handler: Handler,
    *,
    source: str,
    target: str,
    on_failure: str,
) -> MachineSpec:
    """``spec`` with ``state`` (running ``handler``: :func:`child_handler`,
    :func:`fan_out_handler` or :func:`handoff_handler`) on every edge ``source ->
    target``, leaving by :func:`child_transitions` (``target`` on success,
    ``on_failure`` otherwise, ``abort`` on an abort, and ``suspended`` when the child
    waits for an answer, when ``spec`` has that final state and the handler passes a
    child's interrupt up, as all three do)."""
    finals = {s.name for s in spec.final_states}
    suspends = "suspended" in finals and getattr(handler, "suspends", False)
    edges = child_transitions(state.name, target, on_failure, finals=finals, suspends=suspends)
    inserted = spec.insert_between(source, target, state, handler, transitions=edges)
    guards: dict[str, Guard] = {"child_succeeded": child_succeeded}
    if suspends:
        guards["interrupted"] = inserted.guards.get("interrupted", interrupted)
    for name, fn in guards.items():
        inserted = inserted.with_guard(name, fn)
    return inserted


AGENT_TOOL_SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "properties": {"task": {"type": "string", "description": "What the agent is to do."}},
    "required": ["task"],
    "additionalProperties": False,
}


def agent_tool(
    child: Child[Any],
    description: str,
    *,
    name: str | None = None,
    category: str = "code",
    timeout: float | None = None,
) -> ToolSpec:
    """``child`` as a tool the model may call (``{"task": "..."}``), alone or beside
    other calls, eagerly dispatched too. Each call runs the child on the task inside the
    calling run: its events stream through the run's ``events()`` (path
    ``name[call id]``), its usage and cost count against the run's budget, the tool's
    timeout (``timeout``, else the ``category``'s) and an abort of the run abort it.
    Its answer (typed output as JSON, else its text) is the tool result; a child that
    ends in no success state gives an ``is_error`` result naming its exit reason. A
    child that asks (an approval, a question) suspends the calling run on its question;
    resumed, the call goes on in the child with the answer, and the child's answer is
    the call's result."""
    tool_name = name or child.name

    async def run_agent(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        parent = getattr(ctx.run, "phase", ctx.run)  # a view of this turn's tools: its run
        if not isinstance(parent, PhaseContext):
            raise ToolError(
                f"agent tool {tool_name!r} runs its child inside a machine's run; it was "
                "called outside one (give it to HarnessParams(tools=...) of a Harness)"
            )
        path = f"{child.name}[{ctx.tool_use_id}]"
        run = _continued(parent, child, path, str(args["task"]))
        try:
            state = await run.run_to_end(parent.emit)
        except BaseException:  # stopped (a timeout, an abort, the reader left): run anew
            _forget(parent, [run])
            raise
        if _asking([run]) is not None:  # the parent suspends on its question
            _keep(parent, run)
            asked = state.interrupt
            assert asked is not None
            raise ToolInterrupt(attrs.evolve(asked, path=_joined(path, asked.path)))
        _forget(parent, [run])
        result = child_result(state)
        if not run.succeeded:
            detail = f": {_result_text(result)}" if result else ""
            return ToolOutput(
                f"agent {child.name!r} ended in {state.exit_reason}{detail}",
                is_error=True,
                value=result,
            )
        return ToolOutput(_result_text(result), value=state.output or result)

    run_agent.child = child  # type: ignore[attr-defined]  # where a durable worker finds it
    return ToolSpec(
        tool_name,
        description,
        AGENT_TOOL_SCHEMA,
        run_agent,
        category=category,
        timeout=timeout,
        emits_events=True,
    )
