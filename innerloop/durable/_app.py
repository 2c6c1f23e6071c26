"""LoopApp: the loops a worker can run, and the worker side of every durable step.

A worker process is started with a :class:`LoopApp`: named :class:`LoopDefinition`
(params with their tool handlers, the real providers, an optional summarising compactor).
A workflow names the loop it runs; the workflow side builds a machine around step
stand-ins (:func:`LoopApp.start_run`) and the worker side executes the steps
(:meth:`LoopApp.execute`) against the real providers and tools.

A child run (a child state, a fan-out branch, a handoff, an agent tool's child) runs
inside the workflow like its parent, and its model and tool calls are steps too. Code
does not cross JSON, so a step names the child by its names from the loop down
(``"child": ["research"]``) and the worker finds the child where the loop runs it: in
the handler of a state of its machine, or among its agent tools
(:meth:`LoopApp.level`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

from innerloop._errors import ErrorCategory, ProviderError
from innerloop._harness import Harness
from innerloop._messages import ToolUseBlock, block_from_dict, message_from_dict
from innerloop.durable._codec import error_to_dict, tool_result_to_dict
from innerloop.durable._steps import (
    COMPACTION,
    MODEL_CALL,
    TOOL_CALL,
    StepCall,
    StepCompactor,
    StepProvider,
    StepToolRunner,
)
from innerloop.durable._suspend import start_run
from innerloop.fsm._child import Child
from innerloop.fsm._compile import CompiledMachine, compile_spec
from innerloop.fsm._context import Deps
from innerloop.fsm._default import DEFAULT_SPEC
from innerloop.fsm._driver import Run, RunObserver, TransitionObserver
from innerloop.fsm._params import HarnessParams
from innerloop.fsm._spec import MachineSpec
from innerloop.fsm._state import HarnessState
from innerloop.providers._base import Provider, final_response
from innerloop.providers._normalize import WireRequest
from innerloop.recovery._clock import Clock
from innerloop.recovery._compaction import CompactionRequest, Compactor
from innerloop.recovery._tokens import ApproxTokenCounter, MessageTokenCache, TokenCounter
from innerloop.tools._runner import ToolRunner

__all__ = ["LoopApp", "LoopDefinition", "loop_input"]


def _provider_dict(value: Mapping[str, Provider]) -> dict[str, Provider]:
    return dict(value)


def _observers(
    value: Iterable[TransitionObserver | RunObserver],
) -> tuple[TransitionObserver | RunObserver, ...]:
    return tuple(value)


def _machine(value: MachineSpec | CompiledMachine) -> CompiledMachine:
    return value if isinstance(value, CompiledMachine) else compile_spec(value)


def children(machine: CompiledMachine, params: HarnessParams) -> dict[str, Child[Any]]:
    """The children a run of ``machine`` with ``params`` runs, by name: those of its
    states (``child_handler``, ``fan_out_handler``, ``handoff_handler``) and of its
    agent tools. Two different children of one name are refused: a worker could not
    tell which a step means."""
    found: dict[str, Child[Any]] = {}
    runners = [fn for fn, _ in machine.handlers.values()] + [t.handler for t in params.tools]
    for fn in runners:  # a fan-out over several children lists them all in ``children``
        for child in getattr(fn, "children", None) or (getattr(fn, "child", None),):
            if not isinstance(child, Child):
                continue
            if found.setdefault(child.name, child) is not child:
                raise ValueError(
                    f"machine {machine.name!r} runs two different children named "
                    f"{child.name!r}; a durable worker finds a child by its name: give each "
                    "its own name"
                )
    return found


@attrs.frozen
class Level:
    """What runs at one level of a loop: the loop itself, or one of its (grand)children."""

    params: HarnessParams
    providers: Mapping[str, Provider]
    machine: CompiledMachine
    loop: str
    path: tuple[str, ...] = ()
    """The names of the children from the loop down (none: the loop itself)."""

    @property
    def where(self) -> str:
        if not self.path:
            return f"loop {self.loop!r}"
        return f"child {'/'.join(self.path)!r}" + (f" of loop {self.loop!r}" if self.loop else "")

    def child(self, name: str) -> Level:
        found = children(self.machine, self.params)
        child = found.get(name)
        if child is None:
            known = ", ".join(sorted(found)) or "none"
            raise KeyError(
                f"{self.where} runs no child named {name!r} in a state of its machine "
                f"{self.machine.name!r} or an agent tool (its children: {known}); a durable "
                "worker finds a child where the loop runs it: put it in a state of the "
                "machine in the worker's LoopApp (with_child_state with child_handler, "
                "fan_out_handler or handoff_handler) or in its tools (agent_tool)"
            )
        providers = child.providers if child.providers is not None else self.providers
        return Level(child.params, providers, child.compiled, self.loop, (*self.path, name))

    def check(self) -> None:
        """Refuse a level (and, below it, every child) whose models have no provider."""
        missing = sorted({c.provider for c in self.params.model_chain} - set(self.providers))
        if missing:
            fix = (
                f"give the child providers={{'{missing[0]}': ...}} or the loop one"
                if self.path
                else f"pass providers={{'{missing[0]}': ...}}"
            )
            raise ValueError(f"{self.where}: no provider given for {', '.join(missing)}; {fix}")
        for name in children(self.machine, self.params):
            self.child(name).check()


@attrs.frozen
class LoopDefinition:
    """One kind of loop a worker can run.

    ``compactor`` is for a compactor with side effects (one that asks a model for a
    summary): it runs as a durable step. Leave it ``None`` for the deterministic
    truncating compactor, which runs inside the workflow.
    """

    params: HarnessParams
    providers: Mapping[str, Provider] = attrs.field(converter=_provider_dict)
    compactor: Compactor | None = None
    machine: CompiledMachine = attrs.field(
        default=attrs.Factory(lambda: compile_spec(DEFAULT_SPEC)), converter=_machine
    )
    token_counter: TokenCounter = attrs.Factory(ApproxTokenCounter)
    observers: tuple[TransitionObserver | RunObserver, ...] = attrs.field(
        default=(), converter=_observers
    )
    """Watch the run inside the workflow (for example ``innerloop.observe.Tracing``); a
    replayed or recovered workflow reports the steps it replays again."""

    def __attrs_post_init__(self) -> None:
        missing = sorted({c.provider for c in self.params.model_chain} - set(self.providers))
        if missing:
            raise ValueError(
                f"no provider given for {', '.join(missing)}; "
                f"pass providers={{'{missing[0]}': ...}}"
            )
        for name in children(self.machine, self.params):
            self.level("", (name,)).check()

    def level(self, loop: str, child: Iterable[str] = ()) -> Level:
        """The params, providers and machine of the loop, or of its child ``child``
        (names from the loop down)."""
        level = Level(self.params, self.providers, self.machine, loop)
        for name in child:
            level = level.child(name)
        return level


def loop_input(
    loop: str,
    prompt: str | None = None,
    *,
    tasks: Iterable[str] = (),
    state: Mapping[str, Any] | None = None,
    start_at: str | None = None,
    suspend_timeout: float | None = None,
    trace: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The JSON input of a durable loop workflow.

    ``suspend_timeout``: seconds a suspended run waits for its answer before its workflow
    ends in ``suspended`` (None: it waits as long as it takes). ``trace``: the host's
    trace context (W3C ``traceparent``), so the workflow joins the host's trace."""
    if suspend_timeout is not None and not suspend_timeout > 0:
        raise ValueError(
            f"suspend_timeout must be a positive number of seconds or None, not {suspend_timeout!r}"
        )
    return {
        "loop": loop,
        "prompt": prompt,
        "tasks": list(tasks),
        "state": dict(state) if state is not None else None,
        "start_at": start_at,
        "suspend_timeout": suspend_timeout,
        "trace": dict(trace) if trace else None,
    }


class LoopApp:
    """The named loops of an application. Give the same app to every worker."""

    def __init__(self, loops: Mapping[str, LoopDefinition] | None = None) -> None:
        self._loops: dict[str, LoopDefinition] = dict(loops or {})

    def add(self, name: str, definition: LoopDefinition) -> None:
        if name in self._loops:
            raise ValueError(f"a loop named {name!r} is already defined; pick another name")
        self._loops[name] = definition

    def get(self, name: str) -> LoopDefinition:
        try:
            return self._loops[name]
        except KeyError:
            known = ", ".join(sorted(self._loops)) or "none"
            raise KeyError(
                f"no loop named {name!r} in this worker's app (known: {known}); "
                "start the worker with the app that defines it"
            ) from None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self._loops))

    # -- the workflow side ------------------------------------------------------------------

    def harness(self, name: str, call: StepCall, clock: Clock) -> Harness:
        """A harness for loop ``name`` whose provider, tool runner and compactor are steps
        run through ``call``; the machine itself runs here, in the workflow, and so do
        its child runs, whose calls are steps too."""
        d = self.get(name)
        return _StepHarness(
            d.params,
            _step_providers(d.level(name), name, call, ()),
            machine=d.machine,
            clock=clock,
            token_counter=d.token_counter,
            compactor=StepCompactor(name, call) if d.compactor is not None else None,
            tool_runner_factory=lambda: StepToolRunner(name, call),
            observers=d.observers,
            nest=_nest(d, name, call, ()),
        )

    def level(self, loop: str, child: Iterable[str] = ()) -> Level:
        """What a step of loop ``loop`` (of its child ``child``: names from the loop
        down) runs with."""
        return self.get(loop).level(loop, child)

    def start_run(self, start: Mapping[str, Any], call: StepCall, clock: Clock) -> Run:
        """The run a workflow drives, from its input (see :func:`loop_input`)."""
        return start_run(self.harness(start["loop"], call, clock), start)

    # -- the worker side --------------------------------------------------------------------

    async def execute(self, step: str, args: Mapping[str, Any]) -> dict[str, Any]:
        """Run one step for real. Failures of the work are results, never exceptions."""
        definition = self.get(args["loop"])
        if step == MODEL_CALL:
            return await _model_call(self.level(args["loop"], args.get("child", ())), args)
        if step == TOOL_CALL:
            level = self.level(args["loop"], args.get("child", ()))
            call = block_from_dict(args["call"])
            return await _tool_call(level.params, definition.token_counter, call)
        if step == COMPACTION:
            return await _compaction(definition, args)
        raise ValueError(
            f"unknown step {step!r}; expected one of model_call, tool_call, compaction"
        )


def _step_providers(
    level: Level, loop: str, call: StepCall, child: tuple[str, ...]
) -> dict[str, Provider]:
    return {
        c.provider: StepProvider(c.provider, level.providers[c.provider].dialect, loop, call, child)
        for c in level.params.model_chain
    }


def _nest(
    definition: LoopDefinition, loop: str, call: StepCall, above: tuple[str, ...]
) -> Callable[[Deps, Any, str], Deps]:
    """The ``Deps.nest`` of a workflow's runs: a child's providers and tool runner are
    steps naming it, and so are its own children's."""

    def nest(deps: Deps, child: Any, _path: str) -> Deps:
        path = (*above, child.name)
        level = definition.level(loop, path)
        if level.params is not child.params:
            raise ValueError(
                f"{level.where} is not the child a worker finds under that name in the "
                "loop; a durable loop runs the children of its machine's states and its "
                "agent tools: give this one a name of its own and put it in a state "
                "(with_child_state) or an agent tool of the loop"
            )
        return attrs.evolve(
            deps,
            providers=_step_providers(level, loop, call, path),
            tools=StepToolRunner(loop, call, path),
            nest=_nest(definition, loop, call, path),
        )

    return nest


class _StepHarness(Harness):
    """A harness whose runs' children make their calls through ``nest`` (steps)."""

    def __init__(self, *args: Any, nest: Callable[[Deps, Any, str], Deps], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._nest = nest

    def deps(self) -> Deps:
        return attrs.evolve(super().deps(), nest=self._nest)


async def _model_call(level: Level, args: Mapping[str, Any]) -> dict[str, Any]:
    """Open the real provider and stream to the end; return the response or the error."""
    name = args["provider"]
    provider = level.providers[name]
    request = WireRequest(**args["request"])
    try:
        stream = await provider.open(request)
    except Exception as exc:
        return {"phase": "open", "error": error_to_dict(ProviderError.wrap(exc, name))}
    try:
        response = await final_response(stream)
        if response is None:
            raise ProviderError(
                ErrorCategory.TRANSIENT, "the stream ended without a final message", provider=name
            )
    except Exception as exc:
        return {"phase": "stream", "error": error_to_dict(ProviderError.wrap(exc, name))}
    return {"phase": "stream", "response": response.to_dict()}


def _no_abort(reason: str) -> None:
    raise RuntimeError(
        "a tool running as a durable step cannot abort its run; abort it from the host "
        "(the workflow's abort signal)"
    )


@attrs.frozen
class WorkerToolScope:
    """The ``ToolScope`` of a tool call in a worker."""

    params: HarnessParams
    state: HarnessState
    tokens: MessageTokenCache
    request_abort: Callable[[str], None] = _no_abort


async def _tool_call(params: HarnessParams, counter: TokenCounter, call: Any) -> dict[str, Any]:
    """One tool call through the ordinary runner: timeouts and errors become results.

    The tool's context carries the params (the child's, for a child's call) and an empty
    state: tools run in a worker, away from the run's state.
    """
    assert isinstance(call, ToolUseBlock)
    scope = WorkerToolScope(params, HarnessState(), MessageTokenCache(counter))
    [result] = (await ToolRunner().run_calls(scope, [call])).results
    return tool_result_to_dict(result)


async def _compaction(definition: LoopDefinition, args: Mapping[str, Any]) -> dict[str, Any]:
    assert definition.compactor is not None
    request = CompactionRequest(
        tuple(message_from_dict(m) for m in args["history"]),
        args["target_tokens"],
        args["reason"],
        args["keep_recent"],
    )
    try:
        result = await definition.compactor.compact(
            request, MessageTokenCache(definition.token_counter)
        )
    except Exception as exc:  # the machine falls back to truncation
        return {"error": f"{type(exc).__name__}: {exc}"}
    return {
        "history": [m.to_dict() for m in result.history],
        "removed": result.removed,
        "summary": result.summary,
    }
