"""LoopApp: the loops a worker can run, and the worker side of every durable step.

A worker process is started with a :class:`LoopApp`: named :class:`LoopDefinition`
(params with their tool handlers, the real providers, an optional summarising compactor).
A workflow names the loop it runs; the workflow side builds a machine around step
stand-ins (:func:`LoopApp.start_run`) and the worker side executes the steps
(:meth:`LoopApp.execute`) against the real providers and tools.
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
from innerloop.fsm._compile import CompiledMachine, compile_spec
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
        run through ``call``; the machine itself runs here, in the workflow."""
        d = self.get(name)
        providers = {
            c.provider: StepProvider(c.provider, d.providers[c.provider].dialect, name, call)
            for c in d.params.model_chain
        }
        return Harness(
            d.params,
            providers,
            machine=d.machine,
            clock=clock,
            token_counter=d.token_counter,
            compactor=StepCompactor(name, call) if d.compactor is not None else None,
            tool_runner_factory=lambda: StepToolRunner(name, call),
            observers=d.observers,
        )

    def start_run(self, start: Mapping[str, Any], call: StepCall, clock: Clock) -> Run:
        """The run a workflow drives, from its input (see :func:`loop_input`)."""
        return start_run(self.harness(start["loop"], call, clock), start)

    # -- the worker side --------------------------------------------------------------------

    async def execute(self, step: str, args: Mapping[str, Any]) -> dict[str, Any]:
        """Run one step for real. Failures of the work are results, never exceptions."""
        definition = self.get(args["loop"])
        if step == MODEL_CALL:
            return await _model_call(definition, args)
        if step == TOOL_CALL:
            return await _tool_call(definition, block_from_dict(args["call"]))
        if step == COMPACTION:
            return await _compaction(definition, args)
        raise ValueError(
            f"unknown step {step!r}; expected one of model_call, tool_call, compaction"
        )


async def _model_call(definition: LoopDefinition, args: Mapping[str, Any]) -> dict[str, Any]:
    """Open the real provider and stream to the end; return the response or the error."""
    name = args["provider"]
    provider = definition.providers[name]
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


async def _tool_call(definition: LoopDefinition, call: Any) -> dict[str, Any]:
    """One tool call through the ordinary runner: timeouts and errors become results.

    The tool's context carries the params and an empty state: tools run in a worker, away
    from the run's state.
    """
    assert isinstance(call, ToolUseBlock)
    scope = WorkerToolScope(
        definition.params, HarnessState(), MessageTokenCache(definition.token_counter)
    )
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
