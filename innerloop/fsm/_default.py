"""The default machine, declared once as data.

=========  ==========================================================================
state      leaves to (first guard that holds wins)
=========  ==========================================================================
idle       assemble
assemble   abort [abort_requested] · max_turns_exceeded [turn_limit] ·
           compact [over_context_budget] · normalize
compact    abort [abort_requested] · abort [cannot_shrink] · assemble
normalize  call
call       abort [abort_requested] · stream [call_opened] · backoff [rate_limited_retry] ·
           fallback [rate_limited_fallback] · call [transient_retry] ·
           fallback [transient_fallback] · compact [context_overflow] · abort
stream     abort [abort_requested] · backoff [rate_limited_retry] ·
           fallback [rate_limited_fallback] · call [transient_retry] ·
           fallback [transient_fallback] · compact [context_overflow] · abort [failed] ·
           compact [truncated] ·
           execute [has_tool_calls] · check
execute    abort [abort_requested] · suspended [interrupted] · check
check      abort [abort_requested] · max_turns_exceeded [turn_limit_continuing] ·
           budget_exceeded [spend_exceeded] · repair [output_invalid] ·
           model_complete [model_finished] · tasks_complete [tasks_complete] · assemble
repair     abort [abort_requested] · failed [output_rejected] · assemble
backoff    abort [abort_requested] · call
fallback   normalize
abort      aborted [abort_requested] · failed
=========  ==========================================================================

Handlers live in ``_phases.py`` under the state's name; guards in ``_guards.py``.
"""

from __future__ import annotations

from innerloop.fsm import _phases as phases
from innerloop.fsm._guards import DEFAULT_GUARDS
from innerloop.fsm._spec import MachineSpec, StateSpec, TransitionSpec

__all__ = ["DEFAULT_SPEC"]

T = TransitionSpec

STATES = (
    StateSpec("idle", doc="waiting for the run to start"),
    StateSpec("assemble", doc="build the request context and count its tokens"),
    StateSpec("compact", "recovery", doc="shrink the oldest history, keeping it valid"),
    StateSpec("normalize", doc="canonical history to the active provider's wire format"),
    StateSpec("call", doc="open the streaming request"),
    StateSpec("stream", doc="consume the stream and emit structured events"),
    StateSpec("execute", doc="run the tool calls with their timeouts"),
    StateSpec("check", doc="the exit checks"),
    StateSpec("repair", "recovery", doc="send an answer that breaks output_type back"),
    StateSpec("backoff", "recovery", doc="wait before retrying a rate-limited call"),
    StateSpec("fallback", "recovery", doc="switch to the next model in the chain"),
    StateSpec(
        "abort",
        "recovery",
        doc="cancel in-flight work and close the history",
        runs_when_aborting=True,
    ),
    StateSpec("model_complete", "final", "model_complete", "the model ended its turn"),
    StateSpec("tasks_complete", "final", "tasks_complete", "every pending task is done"),
    StateSpec("max_turns_exceeded", "final", "max_turns_exceeded", "the turn limit was hit"),
    StateSpec("budget_exceeded", "final", "budget_exceeded", "the spend budget is spent"),
    StateSpec("aborted", "final", "aborted", "the host aborted the run"),
    StateSpec("failed", "final", "failed", "an unrecoverable error; see the diagnostic"),
    StateSpec("suspended", "final", "suspended", "waiting for an answer; resume the run"),
)

_MODEL_ERRORS = (
    ("backoff", "rate_limited_retry"),
    ("fallback", "rate_limited_fallback"),
    ("call", "transient_retry"),
    ("fallback", "transient_fallback"),
    ("compact", "context_overflow"),
)

TRANSITIONS = (
    T("idle", "assemble"),
    T("assemble", "abort", "abort_requested", "recovery"),
    T("assemble", "max_turns_exceeded", "turn_limit", "exit"),
    T("assemble", "compact", "over_context_budget", "recovery"),
    T("assemble", "normalize"),
    T("compact", "abort", "abort_requested", "recovery"),
    T("compact", "abort", "cannot_shrink", "recovery"),
    T("compact", "assemble", None, "recovery"),
    T("normalize", "call"),
    T("call", "abort", "abort_requested", "recovery"),
    T("call", "stream", "call_opened"),
    *(T("call", target, guard, "recovery") for target, guard in _MODEL_ERRORS),
    T("call", "abort", None, "recovery"),
    T("stream", "abort", "abort_requested", "recovery"),
    *(T("stream", target, guard, "recovery") for target, guard in _MODEL_ERRORS),
    T("stream", "abort", "failed", "recovery"),
    T("stream", "compact", "truncated", "recovery"),
    T("stream", "execute", "has_tool_calls"),
    T("stream", "check"),
    T("execute", "abort", "abort_requested", "recovery"),
    T("execute", "suspended", "interrupted", "exit"),
    T("execute", "check"),
    T("check", "abort", "abort_requested", "recovery"),
    T("check", "max_turns_exceeded", "turn_limit_continuing", "exit"),
    T("check", "budget_exceeded", "spend_exceeded", "exit"),
    T("check", "repair", "output_invalid", "recovery"),
    T("check", "model_complete", "model_finished", "exit"),
    T("check", "tasks_complete", "tasks_complete", "exit"),
    T("check", "assemble"),
    T("repair", "abort", "abort_requested", "recovery"),
    T("repair", "failed", "output_rejected", "exit"),
    T("repair", "assemble", None, "recovery"),
    T("backoff", "abort", "abort_requested", "recovery"),
    T("backoff", "call", None, "recovery"),
    T("fallback", "normalize", None, "recovery"),
    T("abort", "aborted", "abort_requested", "exit"),
    T("abort", "failed", None, "exit"),
)

DEFAULT_SPEC = MachineSpec(
    name="innerloop",
    initial="idle",
    states=STATES,
    transitions=TRANSITIONS,
    handlers={s.name: getattr(phases, s.name) for s in STATES if not s.final},
    guards=DEFAULT_GUARDS,
    import_path="innerloop.fsm:DEFAULT_SPEC",
)
