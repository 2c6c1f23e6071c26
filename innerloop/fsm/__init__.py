"""The machine: spec, compiler, guards, phase handlers, driver, params and state."""

from innerloop.fsm._bounds import Bound, CycleProof, LoopProof, edge_bounds, loop_proof
from innerloop.fsm._child import (
    CHILD_GUARDS,
    Child,
    ChildOutcome,
    ChildRun,
    agent_tool,
    child_handler,
    child_result,
    child_transitions,
    fan_out_handler,
    handoff_handler,
    with_child_state,
)
from innerloop.fsm._compile import CompiledMachine, compile_spec
from innerloop.fsm._context import Deps, PhaseContext, TurnScope, request_settings
from innerloop.fsm._default import DEFAULT_SPEC
from innerloop.fsm._driver import Run, RunHooks, RunObserver, StepHook, TransitionObserver
from innerloop.fsm._guardinfo import GuardInfo, guard, guard_info
from innerloop.fsm._guards import DEFAULT_GUARDS
from innerloop.fsm._locate import MachineNotFound, MachineRecord, find_machine, load_spec
from innerloop.fsm._output import OutputSpec, output_spec
from innerloop.fsm._params import HarnessParams, ModelChoice, PrepareTools, SpendBudget, Thinking
from innerloop.fsm._spec import Guard, Handler, MachineSpec, StateSpec, TransitionSpec
from innerloop.fsm._state import (
    AbortRequest,
    Answer,
    HarnessState,
    Interrupt,
    Outcome,
    OutcomeEnum,
    Task,
)
from innerloop.providers._cache import PromptCache

__all__ = [
    "CHILD_GUARDS",
    "DEFAULT_GUARDS",
    "DEFAULT_SPEC",
    "AbortRequest",
    "Answer",
    "Bound",
    "Child",
    "ChildOutcome",
    "ChildRun",
    "CompiledMachine",
    "CycleProof",
    "Deps",
    "Guard",
    "GuardInfo",
    "Handler",
    "HarnessParams",
    "HarnessState",
    "Interrupt",
    "LoopProof",
    "MachineNotFound",
    "MachineRecord",
    "MachineSpec",
    "ModelChoice",
    "Outcome",
    "OutcomeEnum",
    "OutputSpec",
    "PhaseContext",
    "PrepareTools",
    "PromptCache",
    "Run",
    "RunHooks",
    "RunObserver",
    "SpendBudget",
    "StateSpec",
    "StepHook",
    "Task",
    "Thinking",
    "TransitionObserver",
    "TransitionSpec",
    "TurnScope",
    "agent_tool",
    "child_handler",
    "child_result",
    "child_transitions",
    "compile_spec",
    "edge_bounds",
    "fan_out_handler",
    "find_machine",
    "guard",
    "guard_info",
    "handoff_handler",
    "load_spec",
    "loop_proof",
    "output_spec",
    "request_settings",
    "with_child_state",
]
