"""The machine: spec, compiler, guards, phase handlers, driver, params and state."""

from innerloop.fsm._compile import CompiledMachine, compile_spec
from innerloop.fsm._default import DEFAULT_SPEC
from innerloop.fsm._driver import Run, TransitionObserver
from innerloop.fsm._guards import DEFAULT_GUARDS
from innerloop.fsm._params import HarnessParams, ModelChoice, SpendBudget, Thinking
from innerloop.fsm._spec import Guard, Handler, MachineSpec, StateSpec, TransitionSpec
from innerloop.fsm._state import AbortFlag, HarnessState, Task

__all__ = [
    "DEFAULT_GUARDS",
    "DEFAULT_SPEC",
    "AbortFlag",
    "CompiledMachine",
    "Guard",
    "Handler",
    "HarnessParams",
    "HarnessState",
    "MachineSpec",
    "ModelChoice",
    "Run",
    "SpendBudget",
    "StateSpec",
    "Task",
    "Thinking",
    "TransitionObserver",
    "TransitionSpec",
    "compile_spec",
]
