"""OpenTelemetry tracing and metrics, after the GenAI semantic conventions.

``Harness(..., observers=[Tracing()])`` traces every run:

- ``invoke_agent {agent}``: one span per run (a child of whatever span is current when the
  run starts), with every transition as a span event (source, target, guard) and the
  recovery figures as events (backoff, fallback, compaction, alert, abort), and the run's
  token totals (prompt-cache reads and writes among them) and cost;
- ``chat {model}``: one span per model call, from entering ``call`` until the stream is
  consumed or fails, with the request and response models, the response id, the finish
  reason and the token counts (``gen_ai.usage.cache_read.input_tokens`` and
  ``gen_ai.usage.cache_creation.input_tokens`` for the prompt cache); a failed call records
  its error category;
- ``execute_tool {name}``: one span per tool call, in the call's own task, with its id,
  category, timeout and outcome; the processes the call starts get ``TRACEPARENT``.

Machines inside machines (``innerloop.fsm.Child``) make a tree of spans: a state that runs
children (``child_handler``, ``fan_out_handler``, ``handoff_handler``) has a ``state
{name}`` span under the run's span, from entering the state until leaving it; each child
run's ``invoke_agent {child name}`` span (``innerloop.child.path``: ``survey/web#2``) sits
under that state span, or under the ``execute_tool`` span of the agent tool that ran it,
with the child's own chat, tool and state spans beneath it; a fan-out's branches are
sibling spans.

Metrics: ``gen_ai.client.token.usage`` and ``gen_ai.client.operation.duration``.

Message content (prompts, answers, tool arguments and results) is recorded only with
``capture_content=True``, and every text is scrubbed of keys and tokens first.

Only ``opentelemetry-api`` is needed here. While both the tracer and the meter provider are
the API's own (no SDK set up: the no-op providers, or the proxies waiting for one), a run is
not watched at all, so tracing that is off costs the loop nothing; runs started after the
host sets its providers are traced.
Spans of the default machine's ``call`` and ``stream`` states make the chat spans: a custom
machine that keeps those names keeps its chat spans.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Literal

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from innerloop import _convert
from innerloop._events import (
    Abort,
    Alert,
    Backoff,
    Compacted,
    Event,
    Fallback,
    Finished,
    ModelResponseEvent,
    Transition,
)
from innerloop._messages import ModelResponse, ToolUseBlock
from innerloop._secrets import scrub_secrets
from innerloop.tools._process import CHILD_ENV
from innerloop.tools._spec import ToolCallResult, ToolSpec

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider

    from innerloop.fsm._context import Nest
    from innerloop.fsm._driver import Run

__all__ = ["Tracing"]

_SCOPE = "innerloop"
_MODEL_STATES = frozenset({"call", "stream"})
_TRANSITIONS: dict[tuple[str, str, str | None], dict[str, str]] = {}
"""The attributes of each transition event, made once per edge (the SDK copies them)."""


def _clean(value: str) -> str:
    return scrub_secrets(value)


def _trace_env(span: Span) -> dict[str, str]:
    """``TRACEPARENT`` (and ``TRACESTATE``) naming ``span``, as W3C trace context; the
    environment-variable carrier of OpenTelemetry's specification."""
    sc = span.get_span_context()
    if not sc.is_valid:
        return {}
    env = {"TRACEPARENT": f"00-{sc.trace_id:032x}-{sc.span_id:016x}-{sc.trace_flags:02x}"}
    if sc.trace_state:
        env["TRACESTATE"] = sc.trace_state.to_header()
    return env


def _api_own(provider: object) -> bool:
    """A provider of the OpenTelemetry API itself (no-op, or a proxy that no SDK has been
    set behind), not of an SDK."""
    return type(provider).__module__.startswith(("opentelemetry.trace", "opentelemetry.metrics"))


class _TraceEnv(Mapping[str, str]):
    """:func:`_trace_env` of a span, made only when a process reads it (most tool calls
    start none)."""

    __slots__ = ("_env", "_span")

    def __init__(self, span: Span) -> None:
        self._span = span
        self._env: dict[str, str] | None = None

    def _made(self) -> dict[str, str]:
        if self._env is None:
            self._env = _trace_env(self._span)
        return self._env

    def __getitem__(self, key: str) -> str:
        return self._made()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._made())

    def __len__(self) -> int:
        return len(self._made())


class Tracing:
    """A :class:`~innerloop.fsm.RunObserver` that traces runs with OpenTelemetry.

    ``tracer_provider`` and ``meter_provider`` default to the global ones (set by the
    host's SDK set-up); ``capture_content=True`` records messages and tool arguments and
    results (scrubbed of credentials); ``agent_name`` names the ``invoke_agent`` span (a
    child run's is named by its ``Child``'s name, and nested under the span of the state
    or tool call that ran it).

    ``transitions`` says how the run's span records the machine's transitions:
    ``"events"``, a ``transition`` event each (source, target, guard); ``"summary"``, one
    ``turn`` event per turn listing the states it went through
    (``innerloop.turn.states``) and the guards that chose them (``innerloop.turn.guards``),
    written when the turn ends; ``"off"``, none."""

    def __init__(
        self,
        *,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        capture_content: bool = False,
        agent_name: str = "innerloop",
        transitions: Literal["events", "summary", "off"] = "events",
    ) -> None:
        if transitions not in ("events", "summary", "off"):
            raise ValueError(
                f"transitions must be 'events', 'summary' or 'off', got {transitions!r}"
            )
        self.transitions = transitions
        self.tracer_provider = tracer_provider
        self.meter_provider = meter_provider
        self.tracer = trace.get_tracer(_SCOPE, tracer_provider=tracer_provider)
        meter = metrics.get_meter(_SCOPE, meter_provider=meter_provider)
        self.token_usage = meter.create_histogram(
            "gen_ai.client.token.usage", unit="{token}", description="Tokens used per call"
        )
        self.duration = meter.create_histogram(
            "gen_ai.client.operation.duration", unit="s", description="Duration of a call"
        )
        self.capture_content = capture_content
        self.agent_name = agent_name

    @property
    def off(self) -> bool:
        """True while neither spans nor metrics go anywhere: both providers (the ones
        given, else the global ones) are the OpenTelemetry API's own, which record nothing."""
        tracers = self.tracer_provider or trace.get_tracer_provider()
        meters = self.meter_provider or metrics.get_meter_provider()
        return _api_own(tracers) and _api_own(meters)

    def start_run(self, run: Run) -> RunTrace | None:
        """The hooks that trace ``run`` (called by the driver when the run starts); None
        while tracing is :attr:`off`."""
        return None if self.off else RunTrace(self, run)

    def __repr__(self) -> str:
        return (
            f"Tracing(capture_content={self.capture_content}, agent_name={self.agent_name!r}, "
            f"transitions={self.transitions!r})"
        )


def _child_states(run: Run) -> dict[str, tuple[str, str]]:
    """The states of ``run``'s machine whose handler runs children, each with the
    child's name (a fan-out over several: their names, joined by commas) and the
    handler's kind (``child``, ``fan_out``, ``handoff``)."""
    found = {}
    for state, (handler, _) in run.machine.handlers.items():
        child = getattr(handler, "child", None)
        if child is not None:
            kind = getattr(handler, "__qualname__", "").partition(".")[0]
            every = getattr(handler, "children", None) or (child,)
            names = ",".join(str(getattr(c, "name", state)) for c in every)
            found[state] = (names, kind.removesuffix("_handler"))
    return found


def _parent_trace(tracing: Tracing, nest: Nest) -> RunTrace | None:
    """The trace of the run that runs a child run, when ``tracing`` traces it."""
    for hooks in nest.parent.scope.hooks:
        if isinstance(hooks, RunTrace) and hooks.tracing is tracing:
            return hooks
    return None


class RunTrace:
    """The spans of one run (see :class:`Tracing`)."""

    def __init__(self, tracing: Tracing, run: Run) -> None:
        self.tracing = tracing
        self.run = run
        choice = run.ctx.choice
        attributes = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": tracing.agent_name,
            "gen_ai.provider.name": choice.provider,
            "gen_ai.request.model": choice.model,
            "innerloop.machine": run.machine.name,
        }
        nest, under = run.scope.nest, None
        if nest is not None:  # a child run: under the state or tool call that runs it
            above = _parent_trace(tracing, nest)
            under = above.child_context() if above is not None else None
            attributes["gen_ai.agent.name"] = nest.name
            attributes["innerloop.child.path"] = nest.path
        self.agent = tracing.tracer.start_span(
            f"invoke_agent {attributes['gen_ai.agent.name']}",
            context=under,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
        )
        self.parent = trace.set_span_in_context(self.agent)
        self._runs_children = _child_states(run)
        self._state: tuple[str, Span] | None = None
        """The span of the state running children the run is in, if any."""
        self._tools: dict[int, Span] = {}
        """The open ``execute_tool`` spans, by span id (an agent tool's child nests
        under the one current in its task)."""
        self.chat: Span | None = None
        self.chat_start = 0.0
        self.chat_attributes: dict[str, str] = {}
        """The chat's metric attributes (operation, provider, request and response model)."""
        self._chat_base: dict[tuple[str, str], dict[str, Any]] = {}
        self._metric: dict[tuple[str, ...], tuple[dict[str, str], ...]] = {}
        self._states: list[str] = []
        self._guards: list[str] = []
        self._start: str | None = None
        """The turn so far and where turns start, for ``transitions="summary"``."""
        self._finals = run.machine.finals
        if tracing.capture_content and run.params.system:
            self.agent.set_attribute("gen_ai.system_instructions", _clean(run.params.system))
        notes = {"events": self._transition_event, "summary": self._summarize}
        self._note = notes.get(tracing.transitions)
        """How a transition is recorded on the run's span (None: it is not)."""
        recovery = self._recovery
        self._on: dict[type[Event], Callable[[Any], None]] = {
            Transition: self._transition,
            ModelResponseEvent: self._response_event,
            Finished: self._finished,
            Backoff: recovery,
            Fallback: recovery,
            Compacted: recovery,
            Alert: recovery,
            Abort: recovery,
        }
        self.watches = self._on
        """The event types this run's trace records, each with what records it (the
        driver makes no event of another type for it)."""

    # -- events --------------------------------------------------------------------------

    def on_event(self, event: Event) -> None:
        on = self._on.get(type(event))
        if on is not None:
            on(event)

    def _response_event(self, ev: ModelResponseEvent) -> None:
        self._response(ev.response)

    def _transition(self, ev: Transition) -> None:
        note = self._note
        if note is not None:
            note(ev)
        if ev.source in _MODEL_STATES and ev.target != "stream":
            self._end_chat()
        if ev.target == "call" and self.chat is None:
            self._start_chat()
        if self._state is not None:
            self._end_state(ev.target)
        if ev.target in self._runs_children:
            self._start_state(ev.target)

    # -- states that run children ----------------------------------------------------------

    def _start_state(self, name: str) -> None:
        child, kind = self._runs_children[name]
        span = self.tracing.tracer.start_span(
            f"state {name}",
            context=self.parent,
            kind=SpanKind.INTERNAL,
            attributes={
                "innerloop.state": name,
                "innerloop.state.kind": kind,
                "innerloop.child.name": child,
            },
        )
        self._state = (name, span)

    def _end_state(self, target: str | None) -> None:
        assert self._state is not None
        (_, span), self._state = self._state, None
        outcome = self.run.state.outcome
        if outcome is not None:
            span.set_attribute("innerloop.state.outcome", str(getattr(outcome, "value", outcome)))
        if target is not None:
            span.set_attribute("innerloop.transition.target", target)
        span.end()

    def child_context(self) -> Context:
        """Where a child run of this run starting now puts its span: under the state
        running it, else under the tool call whose task it starts in (an agent tool),
        else under this run's span."""
        if self._state is not None:
            return trace.set_span_in_context(self._state[1], self.parent)
        current = trace.get_current_span().get_span_context()
        if current.span_id in self._tools:
            return otel_context.get_current()
        return self.parent

    def _summarize(self, ev: Transition) -> None:
        """Add ``ev`` to the turn. A turn ends where the machine enters again the state
        the run's first transition entered (``assemble`` in the default machine), or at a
        final state; the first turn also holds that first transition."""
        states = self._states
        if not states:
            states.append(ev.source)
        states.append(ev.target)
        self._guards.append(ev.guard or "")
        if self._start is None:
            self._start = ev.target
        elif ev.target == self._start or ev.target in self._finals:
            self._end_turn()

    def _end_turn(self) -> None:
        if self._states:
            self.agent.add_event(
                "turn",
                {
                    "innerloop.turn.states": tuple(self._states),
                    "innerloop.turn.guards": tuple(self._guards),
                },
            )
            self._states, self._guards = [], []

    def _transition_event(self, ev: Transition) -> None:
        key = (ev.source, ev.target, ev.guard)
        attributes = _TRANSITIONS.get(key)
        if attributes is None:
            attributes = _TRANSITIONS[key] = {
                "innerloop.transition.source": ev.source,
                "innerloop.transition.target": ev.target,
                "innerloop.transition.guard": ev.guard or "",
            }
        self.agent.add_event("transition", attributes)

    def _recovery(self, event: Event) -> None:
        if isinstance(event, Backoff):
            attributes: dict[str, Any] = {
                "innerloop.backoff.attempt": event.attempt,
                "innerloop.backoff.delay": event.delay,
                "innerloop.backoff.total_wait": event.total_wait,
            }
            if event.retry_after is not None:
                attributes["innerloop.backoff.retry_after"] = event.retry_after
            self.agent.add_event("backoff", attributes)
        elif isinstance(event, Fallback):
            self.agent.add_event(
                "fallback",
                {
                    "innerloop.fallback.from_provider": event.from_provider,
                    "innerloop.fallback.from_model": event.from_model,
                    "innerloop.fallback.to_provider": event.to_provider,
                    "innerloop.fallback.to_model": event.to_model,
                    "innerloop.fallback.reason": event.reason,
                },
            )
        elif isinstance(event, Compacted):
            self.agent.add_event(
                "compacted",
                {
                    "innerloop.compaction.reason": event.reason,
                    "innerloop.compaction.tokens_before": event.tokens_before,
                    "innerloop.compaction.tokens_after": event.tokens_after,
                    "innerloop.compaction.removed_messages": event.removed_messages,
                },
            )
        elif isinstance(event, Alert):
            self.agent.add_event(
                "alert",
                {
                    "innerloop.alert.kind": event.kind,
                    "innerloop.alert.message": _clean(event.message),
                },
            )
        elif isinstance(event, Abort):
            self._abort(event)

    def _abort(self, event: Abort) -> None:
        attributes = {"innerloop.abort.reason": _clean(event.reason)}
        error = (event.diagnostic or {}).get("error")
        if isinstance(error, dict) and error.get("category"):
            attributes["error.type"] = str(error["category"])
        self.agent.add_event("abort", attributes)

    # -- the chat span -------------------------------------------------------------------

    def _base(self, provider: str, model: str) -> dict[str, Any]:
        """The attributes every chat span with this model starts with (made once)."""
        params = self.run.params
        base = self._chat_base[provider, model] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider,
            "gen_ai.request.model": model,
            "gen_ai.request.max_tokens": params.max_output_tokens,
        }
        if params.temperature is not None:
            base["gen_ai.request.temperature"] = params.temperature
        return base

    def _start_chat(self) -> None:
        run, tracing = self.run, self.tracing
        choice = run.ctx.choice
        base = self._chat_base.get((choice.provider, choice.model))
        if base is None:
            base = self._base(choice.provider, choice.model)
        self.chat_attributes = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": choice.provider,
            "gen_ai.request.model": choice.model,
        }
        attributes = {**base, "innerloop.turn": run.state.turns + 1}
        if tracing.capture_content:
            messages = [_convert.unstructure(m) for m in run.state.history]
            attributes["gen_ai.input.messages"] = _clean(json.dumps(messages, default=str))
        self.chat = tracing.tracer.start_span(
            f"chat {choice.model}", context=self.parent, kind=SpanKind.CLIENT, attributes=attributes
        )
        self.chat_start = time.monotonic()

    def _response(self, response: ModelResponse) -> None:
        chat = self.chat
        if chat is None:
            return
        usage = response.usage
        model = response.model or self.chat_attributes.get("gen_ai.request.model", "")
        answer: dict[str, Any] = {
            "gen_ai.response.model": model,
            "gen_ai.response.finish_reasons": [response.stop_reason or "unknown"],
            "gen_ai.usage.input_tokens": usage.input_tokens,
            "gen_ai.usage.output_tokens": usage.output_tokens,
            "gen_ai.usage.cache_read.input_tokens": usage.cache_read_tokens,
            "gen_ai.usage.cache_creation.input_tokens": usage.cache_creation_tokens,
        }
        if response.id:
            answer["gen_ai.response.id"] = response.id
        chat.set_attributes(answer)
        attributes = self.chat_attributes
        attributes["gen_ai.response.model"] = model
        _, as_input, as_output = self._metrics(attributes)
        record = self.tracing.token_usage.record
        record(usage.input_tokens, as_input)
        record(usage.output_tokens, as_output)
        if self.tracing.capture_content:
            output = _convert.unstructure(response.message)
            chat.set_attribute("gen_ai.output.messages", _clean(json.dumps([output], default=str)))

    def _metrics(self, chat: dict[str, str]) -> tuple[dict[str, str], ...]:
        """The metric attributes of a chat: as a duration, as input and output tokens;
        made once per provider, request and response model (the SDK keeps them)."""
        key = tuple(chat.values())
        made = self._metric.get(key)
        if made is None:
            made = self._metric[key] = (
                dict(chat),
                {**chat, "gen_ai.token.type": "input"},
                {**chat, "gen_ai.token.type": "output"},
            )
        return made

    def _end_chat(self) -> None:
        chat, self.chat = self.chat, None
        if chat is None:
            return
        error = self.run.state.error
        if error is None and self.run.state.abort is None:
            self.tracing.duration.record(
                time.monotonic() - self.chat_start, self._metrics(self.chat_attributes)[0]
            )
            chat.end()
            return
        metric: dict[str, Any] = dict(self.chat_attributes)
        if error is not None:
            category = error.category.value
            metric["error.type"] = category
            chat.set_attribute("error.type", category)
            if error.status is not None:
                chat.set_attribute("http.response.status_code", error.status)
            message = _clean(str(error))
            chat.add_event(
                "exception", {"exception.type": type(error).__name__, "exception.message": message}
            )
            chat.set_status(Status(StatusCode.ERROR, message))
        elif self.run.state.abort is not None:
            metric["error.type"] = "aborted"
            chat.set_attribute("error.type", "aborted")
        self.tracing.duration.record(time.monotonic() - self.chat_start, metric)
        chat.end()

    # -- the end -------------------------------------------------------------------------

    def _finished(self, ev: Finished) -> None:
        self._end_turn()
        agent = self.agent
        agent.set_attributes(
            {
                "innerloop.exit_reason": ev.exit_reason,
                "innerloop.final_state": ev.final_state,
                "innerloop.turns": ev.turns,
                "gen_ai.usage.input_tokens": ev.usage.input_tokens,
                "gen_ai.usage.output_tokens": ev.usage.output_tokens,
                "gen_ai.usage.cache_read.input_tokens": ev.usage.cache_read_tokens,
                "gen_ai.usage.cache_creation.input_tokens": ev.usage.cache_creation_tokens,
            }
        )
        if ev.cost_usd is not None:
            agent.set_attribute("innerloop.cost_usd", ev.cost_usd)
        diagnostic = self.run.state.diagnostic
        if diagnostic is not None:
            error = diagnostic.get("error")
            category = error.get("category") if isinstance(error, dict) else None
            agent.set_attribute("error.type", str(category or ev.exit_reason))
            agent.set_status(
                Status(StatusCode.ERROR, _clean(str(diagnostic.get("reason") or ev.exit_reason)))
            )

    def on_finish(self, error: BaseException | None) -> None:
        if self.chat is not None:
            self._end_chat()
        if self._state is not None:
            self._end_state(None)
        if error is not None:
            self.agent.set_attribute("error.type", type(error).__name__)
            self.agent.add_event(
                "exception",
                {
                    "exception.type": type(error).__name__,
                    "exception.message": _clean(str(error)),
                },
            )
            self.agent.set_status(Status(StatusCode.ERROR, _clean(str(error))))
        self.agent.end()

    # -- tool calls ----------------------------------------------------------------------

    def tool_started(
        self, call: ToolUseBlock, spec: ToolSpec | None, timeout: float | None
    ) -> tuple[Span, object, object]:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": call.name,
            "gen_ai.tool.call.id": call.id,
            "gen_ai.tool.type": "function",
        }
        if spec is not None:
            attributes["innerloop.tool.category"] = spec.category
            if spec.description:
                attributes["gen_ai.tool.description"] = spec.description
        if timeout is not None:
            attributes["innerloop.tool.timeout"] = timeout
        if self.tracing.capture_content:
            arguments = json.dumps(dict(call.input), default=str)
            attributes["gen_ai.tool.call.arguments"] = _clean(arguments)
        span = self.tracing.tracer.start_span(
            f"execute_tool {call.name}",
            context=self.parent,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
        )
        ctx = trace.set_span_in_context(span, self.parent)
        self._tools[span.get_span_context().span_id] = span
        return span, otel_context.attach(ctx), CHILD_ENV.set(_TraceEnv(span))

    def tool_finished(self, handle: tuple[Span, object, object], result: ToolCallResult) -> None:
        span, token, env_token = handle
        self._tools.pop(span.get_span_context().span_id, None)
        CHILD_ENV.reset(env_token)  # type: ignore[arg-type]
        otel_context.detach(token)  # type: ignore[arg-type]
        outcome = (
            "timeout"
            if result.timed_out
            else "aborted"
            if result.error == "aborted"
            else "error"
            if result.is_error
            else "ok"
        )
        attributes: dict[str, Any] = {
            "innerloop.tool.outcome": outcome,
            "innerloop.tool.duration": result.duration,
        }
        if result.is_error:
            attributes["error.type"] = result.error or "tool_error"
        span.set_attributes(attributes)
        if result.is_error:
            span.set_status(Status(StatusCode.ERROR, _clean(result.output)[:500]))
        if self.tracing.capture_content:
            span.set_attribute("gen_ai.tool.call.result", _clean(result.output))
        span.end()

    def __repr__(self) -> str:
        return f"<RunTrace {self.agent.get_span_context().trace_id:032x}>"
