"""Scenarios: for each transition of a machine, the phase context in which the machine
chooses exactly that transition.

``scenario("call", "backoff")`` builds real data (a ``HarnessState`` with the fields the
guards read, a real ``ModelResponse``, a real ``ProviderError``) and checks, before handing
it over, that the machine's own selection takes that edge. A custom machine registers a
builder for each edge it adds with :meth:`Scenarios.add`. An edge guarded by one of the
default machine's guards (the same function), or a fallthrough edge out of one of its
states, reuses the default builder; the check above says when one does not fit.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Final, TypeAlias

import attrs

from innerloop._errors import ErrorCategory, InnerloopError, ProviderError
from innerloop._messages import (
    Message,
    ModelResponse,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)
from innerloop._tasks import Task
from innerloop.fsm._compile import CompiledMachine
from innerloop.fsm._context import Deps, PhaseContext
from innerloop.fsm._default import DEFAULT_SPEC
from innerloop.fsm._params import HarnessParams, SpendBudget
from innerloop.fsm._spec import MachineSpec, TransitionSpec
from innerloop.fsm._state import HarnessState, Outcome
from innerloop.testing._machine import (
    SCRIPTED_PARAMS,
    EdgeKey,
    compiled_machine,
    counting,
    phase_context,
)

__all__ = ["ScenarioBuilder", "ScenarioError", "Scenarios", "scenario"]

ScenarioBuilder: TypeAlias = Callable[[HarnessParams, HarnessState], HarnessParams | None]
"""Sets the fields of a fresh ``HarnessState`` so that one edge is chosen; returns other
params when the edge needs them (``params.evolve(...)``), or None to keep them."""


@attrs.frozen
class _AnyGuard:
    """The ``guard`` default: whichever guard, as long as only one edge joins the two
    states (``guard=None`` asks for the unguarded fallthrough edge)."""

    def __repr__(self) -> str:
        return "<any guard>"


_ANY: Final = _AnyGuard()


class ScenarioError(InnerloopError, LookupError):
    """No scenario can be built for the transition asked for: it does not exist, more than
    one edge matches, no builder is registered, or the builder makes the machine choose
    another edge. The message says which, and what to do."""

    def __init__(self, machine: str, edge: str, reason: str) -> None:
        self.machine = machine
        self.edge = edge
        super().__init__(reason)


# -- real data ----------------------------------------------------------------------------

_PROMPT = Message.user("What is the weather in Paris?")
_CALL = ToolUseBlock("toolu_scenario_1", "get_weather", {"city": "Paris"})
_USAGE = Usage(input_tokens=120, output_tokens=40)


def _respond(state: HarnessState, message: Message, stop_reason: str) -> None:
    """The stream phase's record of one model turn: history, last response, turn count."""
    state.history = [_PROMPT, message]
    state.last_response = ModelResponse(
        message, stop_reason, _USAGE, model="scripted-model", provider="scripted"
    )
    state.usage = state.usage + _USAGE
    state.turns += 1
    state.outcome = Outcome.RESPONSE


def _answered(params: HarnessParams, state: HarnessState) -> None:
    _respond(state, Message.assistant("It is sunny in Paris."), "end_turn")


def _asked_for_a_tool(params: HarnessParams, state: HarnessState) -> None:
    _respond(state, Message.assistant([TextBlock("Let me look."), _CALL]), "tool_use")


def _ran_the_tool(params: HarnessParams, state: HarnessState) -> None:
    _asked_for_a_tool(params, state)
    state.history.append(Message.user([ToolResultBlock(_CALL.id, "sunny, 24 C")]))
    state.outcome = Outcome.EXECUTED


def _prompted(state: HarnessState, outcome: Outcome) -> None:
    """A phase's record before any model turn: the prompt alone, and the phase's outcome."""
    state.history = [_PROMPT]
    state.outcome = outcome


def _call_failed(
    state: HarnessState, category: ErrorCategory, status: int | None, message: str
) -> None:
    """The call phase's record of a failed request."""
    _prompted(state, Outcome.FAILED)
    state.error = ProviderError(category, message, provider="scripted", status=status)
    state.count_error(category)


def _with_fallback(params: HarnessParams, state: HarnessState) -> HarnessParams:
    """``params`` with a model after the active one in the chain."""
    if state.active + 1 < len(params.model_chain):
        return params
    return params.evolve(fallbacks=(*params.fallbacks, "scripted:fallback-model"))


# -- the default machine's builders, by guard ---------------------------------------------


def _abort_requested(params: HarnessParams, state: HarnessState) -> None:
    state.request_abort("scenario: the host aborts the run")


def _interrupted(params: HarnessParams, state: HarnessState) -> None:
    _asked_for_a_tool(params, state)
    state.outcome = Outcome.INTERRUPTED


def _turn_limit(params: HarnessParams, state: HarnessState) -> None:
    _ran_the_tool(params, state)
    state.turns = params.max_turns


def _over_context_budget(params: HarnessParams, state: HarnessState) -> HarnessParams:
    if params.context_budget is None:
        params = params.evolve(context_budget=params.max_output_tokens * 2)
    assert params.context_budget is not None
    _prompted(state, Outcome.ASSEMBLED)
    state.context_tokens = params.context_budget + 1
    return params


def _cannot_shrink(params: HarnessParams, state: HarnessState) -> None:
    _prompted(state, Outcome.CANNOT_SHRINK)


def _call_opened(params: HarnessParams, state: HarnessState) -> None:
    _prompted(state, Outcome.OPENED)


def _rate_limited_retry(params: HarnessParams, state: HarnessState) -> None:
    _call_failed(state, ErrorCategory.RATE_LIMITED, 429, "rate limit exceeded")
    state.rate_limit_failures = 1


def _rate_limited_fallback(params: HarnessParams, state: HarnessState) -> HarnessParams:
    _call_failed(state, ErrorCategory.RATE_LIMITED, 429, "rate limit exceeded")
    state.rate_limit_failures = params.recovery.max_rate_limit_retries + 1
    return _with_fallback(params, state)


def _transient_retry(params: HarnessParams, state: HarnessState) -> None:
    _call_failed(state, ErrorCategory.TRANSIENT, 503, "service unavailable")
    state.transient_failures = 1


def _transient_fallback(params: HarnessParams, state: HarnessState) -> HarnessParams:
    _call_failed(state, ErrorCategory.TRANSIENT, None, "connection to the server refused")
    state.transient_failures = params.recovery.transient_retries + 1
    return _with_fallback(params, state)


def _context_overflow(params: HarnessParams, state: HarnessState) -> None:
    _call_failed(state, ErrorCategory.CONTEXT_OVERFLOW, 400, "prompt is too long")


def _fatal(params: HarnessParams, state: HarnessState) -> None:
    _call_failed(state, ErrorCategory.FATAL, 401, "invalid x-api-key")


def _truncated(params: HarnessParams, state: HarnessState) -> None:
    _respond(state, Message.assistant("It is sunny in Par"), "max_tokens")


def _spend_exceeded(params: HarnessParams, state: HarnessState) -> HarnessParams:
    budget = params.spend_budget
    if budget is None:
        budget = SpendBudget(max_tokens=_USAGE.total_tokens)
        params = params.evolve(spend_budget=budget)
    _ran_the_tool(params, state)
    if budget.max_tokens is not None:
        state.usage = Usage(input_tokens=budget.max_tokens)
    if budget.max_cost_usd is not None:
        state.cost_usd = budget.max_cost_usd
    return params


def _output_invalid(params: HarnessParams, state: HarnessState) -> None:
    _answered(params, state)
    state.output_problems = ["the answer is not JSON"]
    state.outcome = Outcome.OUTPUT_INVALID


def _tasks_complete(params: HarnessParams, state: HarnessState) -> None:
    _ran_the_tool(params, state)
    state.tasks = [Task("1", "look up the weather in Paris", done=True)]


def _output_rejected(params: HarnessParams, state: HarnessState) -> None:
    _output_invalid(params, state)
    state.output_repairs = params.max_output_repairs
    state.outcome = Outcome.OUTPUT_REJECTED


_BY_GUARD: Mapping[str, ScenarioBuilder] = MappingProxyType(
    {
        "abort_requested": _abort_requested,
        "interrupted": _interrupted,
        "turn_limit": _turn_limit,
        "over_context_budget": _over_context_budget,
        "cannot_shrink": _cannot_shrink,
        "call_opened": _call_opened,
        "rate_limited_retry": _rate_limited_retry,
        "rate_limited_fallback": _rate_limited_fallback,
        "transient_retry": _transient_retry,
        "transient_fallback": _transient_fallback,
        "context_overflow": _context_overflow,
        "failed": _fatal,
        "truncated": _truncated,
        "has_tool_calls": _asked_for_a_tool,
        "turn_limit_continuing": _turn_limit,
        "spend_exceeded": _spend_exceeded,
        "output_invalid": _output_invalid,
        "model_finished": _answered,
        "tasks_complete": _tasks_complete,
        "output_rejected": _output_rejected,
    }
)

# -- the default machine's fallthrough edges, by source -----------------------------------


def _started(params: HarnessParams, state: HarnessState) -> None:
    state.outcome = Outcome.STARTED


def _assembled(params: HarnessParams, state: HarnessState) -> None:
    _prompted(state, Outcome.ASSEMBLED)
    state.context_tokens = 12


def _compacted(params: HarnessParams, state: HarnessState) -> None:
    _prompted(state, Outcome.COMPACTED)
    state.compaction_reason = "over the context budget"


def _normalized(params: HarnessParams, state: HarnessState) -> None:
    _prompted(state, Outcome.NORMALIZED)


def _repaired(params: HarnessParams, state: HarnessState) -> None:
    _answered(params, state)
    state.history.append(Message.user("Your answer must be JSON; try again."))
    state.output_repairs = 1
    state.outcome = Outcome.REPAIRED


def _waited(params: HarnessParams, state: HarnessState) -> None:
    _prompted(state, Outcome.WAITED)
    state.rate_limit_failures = 1
    state.backoff_attempts = 1
    state.total_wait = 1.0


def _switched(params: HarnessParams, state: HarnessState) -> HarnessParams:
    params = _with_fallback(params, state)
    _prompted(state, Outcome.SWITCHED)
    state.active += 1
    state.degraded = True
    return params


def _aborted_on_error(params: HarnessParams, state: HarnessState) -> None:
    _fatal(params, state)
    state.diagnostic = {"category": "fatal", "status": 401}
    state.outcome = Outcome.ABORTED


_FALLTHROUGH: Mapping[str, ScenarioBuilder] = MappingProxyType(
    {
        "idle": _started,
        "assemble": _assembled,
        "compact": _compacted,
        "normalize": _normalized,
        "call": _fatal,
        "stream": _answered,
        "execute": _ran_the_tool,
        "check": _ran_the_tool,
        "repair": _repaired,
        "backoff": _waited,
        "fallback": _switched,
        "abort": _aborted_on_error,
    }
)


# -- the registry ---------------------------------------------------------------------------


def _readonly(value: Mapping[EdgeKey, ScenarioBuilder]) -> Mapping[EdgeKey, ScenarioBuilder]:
    return MappingProxyType(dict(value))


def _guard_text(guard: str | None) -> str:
    return f"guard={guard!r}"


_STATE_FIELDS: Final = frozenset(f.name for f in attrs.fields(HarnessState) if f.init)


@attrs.frozen
class Scenarios:
    """The scenarios of one machine: for each of its transitions, how to build the context
    in which the machine chooses it.

    An edge guarded by one of the default machine's guards (the same function), or a
    fallthrough out of one of its states, uses the default builder; any other edge needs
    one, registered with :meth:`add`::

        scenarios = Scenarios(with_guardrail()).add("redact", "check", redacted)
        ctx = scenarios.context("redact", "check")
    """

    machine: CompiledMachine = attrs.field(converter=compiled_machine)
    """The machine (a ``MachineSpec`` is compiled, and so checked, here)."""
    builders: Mapping[EdgeKey, ScenarioBuilder] = attrs.field(
        factory=dict, converter=_readonly, eq=False
    )
    """The registered builders by edge key ``(source, target, guard)``."""

    @property
    def spec(self) -> MachineSpec:
        return self.machine.spec

    def add(
        self,
        source: str,
        target: str,
        build: ScenarioBuilder,
        *,
        guard: str | _AnyGuard | None = _ANY,
    ) -> Scenarios:
        """These scenarios with ``build`` for the edge ``source -> target`` (``guard``
        picks one where several edges join the two states). Replaces a builder the edge
        had, default or registered."""
        edge = self.transition(source, target, guard)
        return attrs.evolve(self, builders={**self.builders, edge.key: build})

    def transition(
        self, source: str, target: str, guard: str | _AnyGuard | None = _ANY
    ) -> TransitionSpec:
        """The machine's edge ``source -> target`` (with ``guard``, when given). Raises
        :class:`ScenarioError` for an unknown edge (naming the nearest ones) or an
        ambiguous one (naming the guards to choose from)."""
        joining = [t for t in self.spec.transitions_from(source) if t.target == target]
        found = [t for t in joining if isinstance(guard, _AnyGuard) or t.guard == guard]
        if len(found) == 1:
            return found[0]
        name = self.spec.name
        if found:
            asked = f"{source} -> {target}"
            choices = ", or ".join(f"{_guard_text(t.guard)} for {t}" for t in found)
            problem = f"machine {name!r} has {len(found)} transitions {asked}"
            raise ScenarioError(name, asked, f"{problem}; pass the guard: {choices}")
        asked = str(TransitionSpec(source, target, None if isinstance(guard, _AnyGuard) else guard))
        if joining:
            choices = ", or ".join(f"{_guard_text(t.guard)} for {t}" for t in joining)
            hint = f"pass {choices}"
        else:
            hint = self._nearest(source, target)
        raise ScenarioError(name, asked, f"machine {name!r} has no transition {asked}; {hint}")

    def _nearest(self, source: str, target: str) -> str:
        pairs: dict[str, list[str]] = {}
        for t in self.spec.transitions:
            pairs.setdefault(f"{t.source} -> {t.target}", []).append(str(t))
        near = difflib.get_close_matches(f"{source} -> {target}", pairs, n=2, cutoff=0.6)
        if near:
            return "did you mean " + " or ".join(e for pair in near for e in pairs[pair]) + "?"
        if source in self.spec.state_names:
            leaving = ", ".join(str(t) for t in self.spec.transitions_from(source))
            return f"the transitions leaving {source!r} are: {leaving}"
        return f"{source!r} is not one of its states: {', '.join(self.spec.state_names)}"

    def builder(self, edge: TransitionSpec) -> ScenarioBuilder | None:
        """The builder of ``edge``: registered, else the default machine's for an edge
        with a default guard function (or a fallthrough out of a default state), else
        None."""
        build = self.builders.get(edge.key)
        if build is not None:
            return build
        if edge.guard is None:
            return _FALLTHROUGH.get(edge.source)
        if self.spec.guards.get(edge.guard) is DEFAULT_SPEC.guards.get(edge.guard):
            return _BY_GUARD.get(edge.guard)
        return None

    def missing(self) -> list[TransitionSpec]:
        """The machine's edges no builder covers (register them with :meth:`add`)."""
        return [t for t in self.spec.transitions if self.builder(t) is None]

    def context(
        self,
        source: str,
        target: str,
        guard: str | _AnyGuard | None = _ANY,
        *,
        params: HarnessParams | None = None,
        deps: Deps | None = None,
        **overrides: Any,
    ) -> PhaseContext:
        """A phase context in which the machine, in ``source``, chooses the edge to
        ``target``: a fresh ``HarnessState`` set up by the edge's builder, then
        ``overrides`` (``HarnessState`` fields) set on it. ``params`` default to a scripted
        model; the builder may change them (e.g. add a fallback model). ``deps`` as in
        :func:`phase_context`.

        Under the pytest plugin the edge counts for the session's transition coverage:
        the machine was seen to choose it.

        Raises :class:`ScenarioError` when the edge is unknown or ambiguous, has no
        builder, or when the context built makes the machine choose another edge."""
        edge = self.transition(source, target, guard)
        build = self.builder(edge)
        name = self.spec.name
        if build is None:
            raise ScenarioError(
                name,
                str(edge),
                f"no scenario for {edge} of machine {name!r}: register one with "
                f"Scenarios(spec).add({source!r}, {target!r}, build"
                + ("" if guard is _ANY else f", guard={edge.guard!r}")
                + "), where build(params, state) sets the state's fields "
                + (
                    "so that the guards tried before it are false"
                    if edge.guard is None
                    else f"that {edge.guard!r} reads"
                ),
            )
        unknown = sorted(set(overrides) - _STATE_FIELDS)
        if unknown:
            raise ScenarioError(
                name,
                str(edge),
                f"HarnessState has no field {', '.join(map(repr, unknown))}; the fields are: "
                + ", ".join(sorted(_STATE_FIELDS)),
            )
        params = params or SCRIPTED_PARAMS
        state = HarnessState()
        params = build(params, state) or params
        for field, value in overrides.items():
            setattr(state, field, value)
        ctx = phase_context(params, state, deps)
        chosen = self.machine.select(source, ctx)
        if chosen.key == edge.key:
            for observer in counting():
                observer.on_transition(name, chosen)
            return ctx
        if overrides:
            given = ", ".join(f"{k}={v!r}" for k, v in overrides.items())
            fix = f"drop or change the overrides ({given})"
        else:
            fix = (
                f"register a builder with .add({source!r}, {target!r}, build) whose state "
                f"makes the guards tried before {edge} false"
            )
        raise ScenarioError(
            name,
            str(edge),
            f"the scenario of {edge} makes machine {name!r} choose {chosen} instead; {fix}",
        )


def scenario(
    source: str,
    target: str,
    guard: str | _AnyGuard | None = _ANY,
    *,
    spec: MachineSpec | CompiledMachine | Scenarios = DEFAULT_SPEC,
    params: HarnessParams | None = None,
    deps: Deps | None = None,
    **overrides: Any,
) -> PhaseContext:
    """The phase context in which ``spec`` (the default machine unless given), in
    ``source``, chooses its edge to ``target``, e.g. ``scenario("call", "backoff")``;
    ``guard`` picks one where several edges join the two states
    (``scenario("call", "abort", "abort_requested")``, ``guard=None`` for the
    fallthrough). Shorthand for ``Scenarios(spec).context(...)``; see
    :meth:`Scenarios.context`."""
    scenarios = spec if isinstance(spec, Scenarios) else Scenarios(spec)
    return scenarios.context(source, target, guard, params=params, deps=deps, **overrides)
