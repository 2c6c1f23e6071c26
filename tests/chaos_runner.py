"""The chaos campaign: many seeded runs with random faults over loopback HTTP, each checked
against the invariants every run must keep, however it ends.

One run is planned from its seed alone (:func:`plan`): a primary model on one of four
providers (Anthropic or OpenAI, each on the SDK's route or on the ``AsyncioTransport``
wire route), maybe a fallback on the other dialect, a script of model calls (replies with
tool calls, max_tokens cuts, a final answer) with faults between them (429s with every
Retry-After form, 529s, 5xx, malformed, wrong-shape, unindexed, corrupt-gzip, empty and
dropped streams, connection resets (TCP RST), in-stream errors, oversized events,
trickles, hangs, context overflow, a bad key), tools that fail, time out or start
processes, and maybe a host abort.

The two loopback servers stay up for the whole campaign; each run's script is served by
the run's tag (in its system prompt), so runs interleave freely. Each model call takes
the run's next script step, whichever server it reaches. Backoff waits go through a
:class:`~innerloop.testing.FakeClock`; hangs end at the providers' HTTP timeout, trickles
at their event size cap.

The invariants (:func:`check_run`): a final state whose exit_reason matches; a valid
history that normalizes for both dialects; the state round-trips through JSON; counters
add up (turns, usage, backoff, fallback, errors against the steps served: a call the
HTTP timeout ends on a loaded machine is late, not a break); tool results as the tools
behave (a quick one at its limit is late); no API key in any event, the state or the
diagnostic. Per wave of concurrent runs: no process left behind, no warning, no logged
warning, no unhandled asyncio error.

``bench/chaos.py`` is the command line; ``tests/test_chaos.py`` runs a slice.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import gc
import json
import logging
import os
import random
import re
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs

from innerloop import Harness, HarnessParams
from innerloop._convert import structure, unstructure
from innerloop._events import (
    Backoff,
    Event,
    Fallback,
    Finished,
    ModelResponseEvent,
    ToolExecuted,
    Transition,
)
from innerloop._messages import ToolUseBlock, Usage
from innerloop.fsm import CompiledMachine, compile_spec
from innerloop.fsm._default import DEFAULT_SPEC
from innerloop.fsm._driver import TransitionObserver
from innerloop.fsm._params import SpendBudget
from innerloop.fsm._state import HarnessState
from innerloop.providers import AnthropicProvider, AsyncioTransport, OpenAIProvider
from innerloop.providers._normalize import normalize
from innerloop.recovery._gate import RateLimitGates
from innerloop.recovery._policy import backoff_delay
from innerloop.recovery._tokens import TiktokenCounter
from innerloop.testing import (
    AnthropicServer,
    FakeClock,
    Fault,
    OpenAIServer,
    Oversized,
    RateLimit,
    Raw,
    Reply,
    StreamError,
    Trickle,
    Truncated,
    history_problems,
    reply,
    tool_call,
)
from innerloop.testing._servers import LoopbackServer, Step, _Plan
from innerloop.tools import Sandbox, ToolSpec, builtin_tools, tool

__all__ = [
    "Board",
    "Break",
    "ChaosStep",
    "Exhausted",
    "Outcome",
    "Plan",
    "Report",
    "busy_processes",
    "check_run",
    "plan",
    "run_campaign",
]

ANTHROPIC_KEY = "sk-ant-api03-chaos-" + "7f3a9c1e5b2d4680" * 2
OPENAI_KEY = "sk-proj-chaos-" + "0e9d8c7b6a5f4e3d" * 2
KEYS = (ANTHROPIC_KEY, OPENAI_KEY)
MODELS = {"anthropic": "claude-sonnet-4-5-20250929", "openai": "gpt-4o-mini-2024-07-18"}
PROVIDERS = ("anthropic_sdk", "anthropic_wire", "openai_sdk", "openai_wire")
MAX_EVENT_BYTES = 64 * 1024
HTTP_TIMEOUT = 3.0
"""Ends a hang; generous, so a loaded machine's slow answer is not mistaken for one."""
RUN_DEADLINE = 30.0
TAG = re.compile(r"chaos-run-(\d+)")


@attrs.frozen
class Reset:
    """``reply`` cut after ``after_events`` frames by a connection reset (TCP RST)."""

    reply: Reply
    after_events: int = 2


@attrs.frozen
class Exhausted:
    """What the server answers a call made past the run's script: a 400 (fatal). Kept
    among the steps served, so a call the server never read (a timeout on a loaded
    machine) is told from one past the script."""


ChaosStep = Step | Reset
Served = ChaosStep | Exhausted

# -- what a step does to the run ----------------------------------------------------------

TURN = "turn"


def expected_category(step: Served) -> str:
    """What a served step must end as: a model turn or an error category."""
    if isinstance(step, Reply):
        return TURN
    if isinstance(step, Exhausted):
        return "fatal"
    if isinstance(step, Reset):
        return "transient"
    if isinstance(step, RateLimit):
        return "rate_limited"
    if isinstance(step, Fault):
        if step.kind in ("overloaded", "rate_limited", "context_overflow", "fatal"):
            return step.category.value
        return "transient"
    if isinstance(step, StreamError):
        return STREAM_ERRORS[step.error_type][1]
    return "transient"  # Truncated, other StreamErrors, Oversized past the cap, Trickle, Raw


STREAM_ERRORS = {  # error type in the stream -> (message, category it must count as)
    "api_error": ("boom", "transient"),
    "overloaded_error": ("Overloaded", "overloaded"),
    "rate_limit_error": ("rate limit exceeded", "rate_limited"),
    "invalid_request_error": ("prompt is too long: 212345 tokens > 200000", "context_overflow"),
}

# -- tools ------------------------------------------------------------------------------------


@tool(category="network")
async def lookup(query: str) -> str:
    """Look a query up.

    Args:
        query: what to look up
    """
    return f"found {query}"


@tool(category="network")
async def flaky(query: str) -> str:
    """A service that is down.

    Args:
        query: what to ask it
    """
    raise ConnectionError(f"service for {query!r} is unreachable")


@tool(category="network", timeout=0.5)
async def slow(seconds: float) -> str:
    """Wait, then answer.

    Args:
        seconds: how long to wait
    """
    await asyncio.sleep(seconds)
    return "slept"


@tool
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first
        b: the second
    """
    return a + b


# each shell/python call: (tool, arguments, expected "ok" | "error" | "timeout")
PROCESS_CALLS: tuple[tuple[str, dict[str, Any], str], ...] = (
    ("run_shell", {"command": "echo hello"}, "ok"),
    ("run_shell", {"command": "exit 3"}, "error"),
    ("run_shell", {"command": "sleep 30"}, "timeout"),
    ("run_shell", {"command": "sleep 30 & echo started"}, "ok"),
    ("run_shell", {"command": "setsid sleep 30 & echo detached"}, "ok"),
    ("run_shell", {"command": "env"}, "ok"),
    ("run_shell", {"command": "head -c 300000 /dev/zero | tr '\\0' x"}, "ok"),
    ("run_python", {"code": "import os; print(dict(os.environ))"}, "ok"),
    ("run_python", {"code": "import time; time.sleep(30)"}, "timeout"),
    ("run_python", {"code": "raise SystemExit(2)"}, "error"),
)
PLAIN_CALLS: tuple[tuple[str, dict[str, Any], str], ...] = (
    ("lookup", {"query": "weather"}, "ok"),
    ("flaky", {"query": "weather"}, "error"),
    ("slow", {"seconds": 5}, "timeout"),
    ("slow", {"seconds": 0.01}, "ok"),
    ("add", {"a": 2, "b": 3}, "ok"),
    ("add", {"a": "two"}, "error"),  # fails validation
    ("nonexistent", {}, "error"),  # unknown tool
)
TOOL_TIMEOUTS = {"shell": 2.0, "code": 2.0, "network": 0.5, "file": 2.0}
"""Generous for a loaded machine: a quick command must not time out, a sleeper must."""
TOOL_LIMITS = {"run_shell": 2.0, "run_python": 2.0, "tasks": 2.0, "add": 2.0}
TOOL_LIMITS.update(dict.fromkeys(("lookup", "flaky", "slow"), 0.5))


def chaos_tools(workspace: str, tag: str) -> tuple[ToolSpec, ...]:
    """The tools of one job slot; its processes carry ``CHAOS_RUN=tag`` in their
    environment, so the ones a run leaves behind are told from those of the runs still
    going (a slot plays one run at a time)."""
    sandbox = Sandbox(isolation="process", set_env={"CHAOS_RUN": tag})
    builtins = builtin_tools("shell", "python", "tasks", workspace=workspace, sandbox=sandbox)
    return (lookup, flaky, slow, add, *builtins)


# -- the plan of one run ----------------------------------------------------------------------


@attrs.frozen
class Plan:
    """Everything one run does, drawn from its seed."""

    seed: int
    primary: str
    fallback: str | None
    steps: tuple[ChaosStep, ...]
    tool_expectations: dict[str, str]
    """tool_use id -> ok | error | timeout"""
    max_turns: int
    spend_tokens: int | None
    context_budget: int | None
    tasks: tuple[str, ...]
    abort: tuple[str, float | str] | None
    """(how, when): ``time`` / ``thread`` after seconds, ``event`` after that many events,
    ``state`` as the run enters that state."""

    @property
    def tag(self) -> str:
        return f"chaos-run-{self.seed}"

    @property
    def timed_abort(self) -> bool:
        """Whether the host abort fires after a time (where it lands depends on the
        machine's speed); one aimed at a state or an event count lands where it aims."""
        return self.abort is not None and self.abort[0] in ("time", "thread")


def _fault(rng: random.Random) -> ChaosStep:  # noqa: C901  one table of weighted choices
    r = rng.random()
    if r < 0.25:
        form = rng.choice(("seconds", "ms", "date"))
        return RateLimit(rng.choice((None, 0.5, 2.0, 30.0)), form)  # type: ignore[arg-type]
    if r < 0.32:
        return Fault.overloaded(rng.choice((None, 1.0)))
    if r < 0.40:
        return Fault.server_error(rng.choice((500, 502, 503)))
    if r < 0.60:
        kind = rng.choice(
            ("malformed", "wrong_shape", "missing_index", "corrupt_gzip", "empty", "dropped")
        )
        return Fault(kind, None, None, kind, rng.randint(0, 4))
    if r < 0.63:
        return Truncated(reply("a reply cut short " * 4), rng.randint(1, 6))
    if r < 0.66:
        return Reset(reply("a reply reset " * 4), rng.randint(0, 6))
    if r < 0.72:
        error_type = rng.choice(sorted(STREAM_ERRORS))
        return StreamError(error_type, STREAM_ERRORS[error_type][0], rng.randint(0, 3))
    if r < 0.76:
        return Oversized(MAX_EVENT_BYTES * 2, piece=16 * 1024)
    if r < 0.80:
        return Trickle(4096, 0.0, rng.choice((None, 8192)))
    if r < 0.82:
        return Fault.hang()
    if r < 0.90:
        return Fault.context_overflow()
    if r < 0.93:
        return Fault.fatal()
    if r < 0.97:
        return Raw(503, (("content-type", "text/html"),), b"<html>upstream down</html>")
    return Raw(200, (("content-type", "application/json"),), b"{not json", rng.random() < 0.5)


ABORT_STATES = (
    *("assemble", "compact", "normalize", "call", "stream", "execute", "check"),
    *("backoff", "fallback", "execute") * 3,  # rarer on a run's path: aimed at more often
)


def _limited(rng: random.Random) -> ChaosStep:
    """A rate-limit answer: a 429, a 529, or a rate-limit error in the stream."""
    r = rng.random()
    if r < 0.5:
        return RateLimit(rng.choice((None, 1.0, 4.0)), rng.choice(("seconds", "ms", "date")))
    if r < 0.75:
        return Fault.overloaded(rng.choice((None, 2.0)))
    return StreamError("rate_limit_error", "rate limit exceeded", rng.randint(0, 3))


def _tool_reply(
    rng: random.Random, seed: int, n: int, expect: dict[str, str], with_tasks: bool
) -> Reply:
    calls = []
    for k in range(rng.randint(1, 3)):
        pool = PROCESS_CALLS if rng.random() < 0.3 else PLAIN_CALLS
        name, args, outcome = rng.choice(pool)
        tid = f"toolu_c{seed}n{n}k{k}"
        expect[tid] = outcome
        calls.append(tool_call(name, args, id=tid))
    if with_tasks:
        tid = f"toolu_c{seed}n{n}t"
        expect[tid] = "ok"
        calls.append(tool_call("tasks", {"action": "complete", "id": "t1"}, id=tid))
    return reply(f"step {n}", *calls)


def plan(seed: int) -> Plan:
    rng = random.Random(seed)
    primary = rng.choice(PROVIDERS)
    fallback = None
    if rng.random() < 0.6:
        fallback = rng.choice([p for p in PROVIDERS if p.split("_")[0] != primary.split("_")[0]])
    tasks = ("finish the chaos task",) if rng.random() < 0.15 else ()
    turns = rng.randint(1, 4)
    task_turn = rng.randrange(turns) if tasks else -1
    expect: dict[str, str] = {}
    steps: list[ChaosStep] = []
    for n in range(turns):
        if rng.random() < 0.06:  # a storm: past the backoff retries, on to the fallback
            steps += [_limited(rng) for _ in range(6)]
        while rng.random() < 0.4:
            steps.append(_fault(rng))
        if n == turns - 1:
            steps.append(reply(f"done after {n} tool turns"))
        elif rng.random() < 0.15:
            steps.append(
                reply("cut", stop_reason="max_tokens", incomplete_tool=("lookup", '{"que'))
            )
            steps.append(_tool_reply(rng, seed, n, expect, n == task_turn))
        else:
            steps.append(_tool_reply(rng, seed, n, expect, n == task_turn))
    abort: tuple[str, float | str] | None = None
    if rng.random() < 0.2:
        how = rng.choice(("time", "thread", "event", "state", "state"))
        if how == "event":
            abort = (how, float(rng.randint(1, 80)))
        elif how == "state":
            abort = (how, rng.choice(ABORT_STATES))
        else:
            abort = (how, rng.uniform(0, 0.4))
    return Plan(
        seed,
        primary,
        fallback,
        tuple(steps),
        expect,
        rng.randint(1, 3) if rng.random() < 0.1 else 20,
        rng.randint(20, 80) if rng.random() < 0.1 else None,
        rng.randint(1500, 4000) if rng.random() < 0.15 else None,
        tasks,
        abort,
    )


# -- the servers: one script per run ----------------------------------------------------------


class Board:
    """The scripts of the runs in flight, by tag; both servers take from it."""

    def __init__(self) -> None:
        self.scripts: dict[str, collections.deque[ChaosStep]] = {}
        self.served: dict[str, list[Served]] = {}
        self.lock = threading.Lock()

    def add(self, p: Plan) -> None:
        self.put(p.tag, p.steps)

    def put(self, tag: str, steps: Sequence[ChaosStep]) -> None:
        with self.lock:
            self.scripts[tag] = collections.deque(steps)
            self.served[tag] = []

    def take(self, tag: str) -> ChaosStep | None:
        """The run's next step (None past its script, which is recorded as served)."""
        with self.lock:
            script = self.scripts.get(tag)
            step: Served = script.popleft() if script else Exhausted()
            if tag in self.served:  # a late request of a run that ended takes nothing
                self.served[tag].append(step)
            return None if isinstance(step, Exhausted) else step

    def absorb(self, tag: str) -> None:
        """The run's last step was not a call's outcome: the provider asks again (taking
        the next step for the same call)."""
        with self.lock:
            if self.served.get(tag):
                self.served[tag].pop()

    def remove(self, tag: str) -> list[Served]:
        with self.lock:
            self.scripts.pop(tag, None)
            return self.served.pop(tag, [])


def _tag(body: Any) -> str | None:
    if not isinstance(body, dict):
        return None
    system = body.get("system")
    if system is None:
        messages = body.get("messages") or [None]
        first = messages[0]
        system = first.get("content") if isinstance(first, dict) else None
    match = TAG.search(json.dumps(system)) if system else None
    return match.group(0) if match else None


def _asked_again(path: str, step: ChaosStep) -> bool:
    """A streamed Chat Completions request answered 200 with an empty body is asked once
    more without streaming (OpenAIProvider): that step is not the call's outcome."""
    return path.endswith("chat/completions") and isinstance(step, Fault) and step.kind == "empty"


def _routed(base: type[LoopbackServer], board: Board) -> LoopbackServer:
    class Routed(base):  # type: ignore[valid-type,misc]
        def _plan(self, path: str, body: Any) -> _Plan:
            tag = _tag(body)
            if path != self.path or tag is None:
                return super()._plan(path, body)  # type: ignore[no-any-return]
            step = board.take(tag)
            if step is None:
                message = f"chaos script of {tag} exhausted"
                return self._error(400, "invalid_request_error", message)  # type: ignore[no-any-return]
            self.played += 1
            stream = bool(body.get("stream"))
            if stream and _asked_again(self.path, step):
                board.absorb(tag)
            if isinstance(step, Reset):
                plan = self._render(Truncated(step.reply, step.after_events), stream, "m")
                resets.add(id(plan))
                return plan  # type: ignore[no-any-return]
            return self._render(step, stream, str(body.get("model")))  # type: ignore[no-any-return]

        async def _send(self, writer: asyncio.StreamWriter, plan: _Plan, keep: bool) -> None:
            await super()._send(writer, plan, keep)
            if id(plan) in resets:  # the frames are out: now a TCP RST, not a FIN
                resets.discard(id(plan))
                sock = writer.get_extra_info("socket")
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                writer.transport.abort()

    resets: set[int] = set()
    server: LoopbackServer = Routed()
    server.requests = collections.deque(maxlen=8)  # type: ignore[assignment]
    return server


# -- one run ----------------------------------------------------------------------------------


@attrs.frozen
class Break:
    """A broken invariant: the seed that shows it, and what broke."""

    seed: int
    what: str


@attrs.define
class Outcome:
    seed: int
    state: HarnessState
    events: list[Event]
    served: list[Served]
    abort_fired: bool
    seconds: float
    errors: list[str] = attrs.Factory(list)
    """The failures of the run's calls, in order."""
    late_tools: int = 0
    late_calls: int = 0
    """Calls that hit the HTTP timeout without a hang served (a loaded machine)."""


def _params(p: Plan, tools: tuple[ToolSpec, ...]) -> HarnessParams:
    chain = [p.primary] + ([p.fallback] if p.fallback else [])
    models = [f"{name}:{MODELS[name.split('_')[0]]}" for name in chain]
    return HarnessParams(
        model=models[0],
        fallbacks=models[1:],
        system=f"You are a chaos agent ({p.tag}).",
        tools=tools,
        max_turns=p.max_turns,
        spend_budget=SpendBudget(max_tokens=p.spend_tokens) if p.spend_tokens else None,
        context_budget=p.context_budget,
        tool_timeouts=TOOL_TIMEOUTS,
        max_output_tokens=1024,
    )


def _arm_abort(p: Plan, run: Any, fired: list[bool]) -> Callable[[], None]:
    """Schedule the plan's host abort; returns the disarm function."""
    if p.abort is None or p.abort[0] in ("event", "state"):
        return lambda: None

    def fire() -> None:
        fired[0] = True
        run.abort(f"chaos abort of {p.tag}")

    how, when = p.abort
    assert isinstance(when, float)
    if how == "thread":
        timer = threading.Timer(when, fire)
        timer.daemon = True
        timer.start()
        return timer.cancel
    handle = asyncio.get_running_loop().call_later(when, fire)
    return handle.cancel


async def play(p: Plan, harness: Harness, board: Board) -> Outcome:
    board.add(p)
    run = harness.start("Do the chaos task.", tasks=p.tasks)
    events: list[Event] = []
    errors: list[str] = []
    fired = [False]
    disarm = _arm_abort(p, run, fired)
    started = time.monotonic()

    how, when = p.abort if p.abort is not None else ("", "")

    async def consume() -> None:
        async for event in run.events():
            events.append(event)
            if isinstance(event, Transition) and event.source in ("call", "stream"):
                if run.state.error is not None:
                    errors.append(str(run.state.error)[:200])
            if (how == "event" and len(events) == when) or (
                how == "state" and isinstance(event, Transition) and event.target == when
            ):
                fired[0] = True
                run.abort(f"chaos abort of {p.tag}")

    try:
        await asyncio.wait_for(consume(), RUN_DEADLINE)
    finally:
        disarm()
        served = board.remove(p.tag)
    if p.abort is not None and p.abort[0] == "thread":
        await asyncio.sleep(0)  # a timer thread that fired has set its flag
    seconds = time.monotonic() - started
    return Outcome(p.seed, run.state, events, served, fired[0], seconds, errors)


# -- the invariants ---------------------------------------------------------------------------


def _problems_final(o: Outcome, harness: Harness) -> Iterator[str]:
    s, machine = o.state, harness.machine
    if s.final_state not in machine.finals:
        yield f"final state {s.final_state!r} is not a final state of {machine.name}"
    elif s.exit_reason != machine.exit_reason(s.final_state):
        yield f"exit_reason {s.exit_reason!r} does not match final state {s.final_state!r}"
    finished = [e for e in o.events if isinstance(e, Finished)]
    if len(finished) != 1 or o.events[-1] is not finished[0]:
        yield f"{len(finished)} finished events, not one at the end"
    if s.final_state == "aborted" and not o.abort_fired:
        yield "ended aborted although nobody asked"
    if s.final_state == "failed" and not s.diagnostic:
        yield "failed without a diagnostic"


def _problems_history(o: Outcome) -> Iterator[str]:
    yield from history_problems(o.state.history)
    for dialect in ("anthropic", "openai"):
        try:
            normalize(o.state.history, dialect)
        except Exception as exc:
            yield f"normalize for {dialect} raises {exc!r}"
    try:
        data = unstructure(o.state)
        again = unstructure(structure(json.loads(json.dumps(data)), HarnessState))
        if again != data:
            yield "the state does not round-trip through JSON"
    except Exception as exc:
        yield f"the state does not round-trip through JSON: {exc!r}"


def _problems_backoff(o: Outcome, harness: Harness) -> Iterator[str]:
    """Retry-After overrides the 1 s doubling schedule; a fallback for rate limits comes
    after exactly the policy's backoff retries on the model it leaves."""
    policy = harness.params.recovery
    since = 0  # backoffs since the last turn or fallback
    for e in o.events:
        if isinstance(e, Backoff):
            since += 1
            want = (
                e.retry_after
                if e.retry_after is not None
                else backoff_delay(policy, e.attempt, None)
            )
            if e.delay != want or e.attempt != since:
                yield f"backoff {e} should wait {want} s as attempt {since}"
        elif isinstance(e, Fallback):
            if e.reason == "transient":  # the endpoint is down: no backoff came first
                since = 0
                continue
            if since != policy.max_rate_limit_retries:
                yield f"fell back after {since} backoffs, not {policy.max_rate_limit_retries}"
            since = 0
        elif isinstance(e, ModelResponseEvent):
            since = 0


def _problems_counters(o: Outcome, harness: Harness) -> Iterator[str]:
    s, ev = o.state, o.events
    responses = [e for e in ev if isinstance(e, ModelResponseEvent)]
    if [e.turn for e in responses] != list(range(1, len(responses) + 1)) or s.turns != len(
        responses
    ):
        yield f"turns {s.turns} but model_response turns {[e.turn for e in responses]}"
    usage = sum((e.response.usage for e in responses), Usage())
    if usage != s.usage:
        yield f"usage {s.usage} is not the sum of the responses' {usage}"
    backoffs = [e for e in ev if isinstance(e, Backoff)]
    if len(backoffs) != s.backoff_attempts:
        yield f"{len(backoffs)} backoff events but backoff_attempts={s.backoff_attempts}"
    if abs(sum(b.delay for b in backoffs) - s.total_wait) > 1e-6 * (1 + s.total_wait):
        if not (o.abort_fired and len(backoffs) and s.final_state == "aborted"):
            yield f"total_wait {s.total_wait} is not the sum of the backoff delays"
    fallbacks = [e for e in ev if isinstance(e, Fallback)]
    if len(fallbacks) != s.active or s.degraded != bool(fallbacks):
        yield f"{len(fallbacks)} fallback events but active={s.active} degraded={s.degraded}"
    calls = sum(1 for e in ev if isinstance(e, Transition) and e.target == "call")
    failures = sum(s.errors.values())
    if len(o.served) > calls:
        yield f"{len(o.served)} steps served for {calls} calls"
    if s.turns + failures > calls:
        yield f"{s.turns} turns + {failures} failures > {calls} calls"
    if not o.abort_fired:
        yield from _problems_served(o, calls, failures)


TIMED_OUT = re.compile(r" transient: \w*Timeout\w*: ")
"""A call's error when the provider's HTTP timeout ended it (either SDK, or the wire)."""


def _is_hang(step: Served) -> bool:
    return isinstance(step, Fault) and step.kind == "hang"


def _problems_served(o: Outcome, calls: int, failures: int) -> Iterator[str]:
    """Without an abort, every call ended as the step it was served says.

    A call that hits the HTTP timeout counts transient. A served hang must end so; on a
    loaded machine any other call may too (``o.late_calls``, not a break): before the
    server read its request (no step taken for it) or after (that step's outcome is what
    the timeout replaced). Every other outcome must be a step's, exactly."""
    s = o.state
    if s.turns + failures != calls:
        yield f"{s.turns} turns + {failures} failures != {calls} calls"
    expected = collections.Counter(expected_category(step) for step in o.served)
    got = collections.Counter({TURN: s.turns, **s.errors})
    timeouts = sum(1 for error in o.errors if TIMED_OUT.search(error))
    hangs = sum(1 for step in o.served if _is_hang(step))
    unread = calls - len(o.served)  # requests the server never planned
    rest_expected = expected - collections.Counter(transient=hangs)
    rest_got = got - collections.Counter(transient=timeouts)
    replaced = rest_expected - rest_got  # outcomes a late timeout took the place of
    late = timeouts - hangs
    if rest_got - rest_expected or min(late, unread) < 0 or unread + replaced.total() != late:
        yield (
            f"served {dict(expected)} but the run counted {dict(+got)} ({timeouts} timeouts, "
            f"{hangs} hangs served, {unread} calls unread); errors: {o.errors}"
        )
    else:
        o.late_calls = late


PROCESS_TOOLS = frozenset(name for name, _, _ in PROCESS_CALLS)


def _spawns(p: Plan) -> bool:
    """Whether the plan calls a tool that starts processes."""
    return any(
        b.name in PROCESS_TOOLS
        for s in p.steps
        if isinstance(s, Reply)
        for b in s.blocks
        if isinstance(b, ToolUseBlock)
    )


def _problems_tools(o: Outcome, p: Plan) -> Iterator[str]:
    """Each tool ends as it behaves. A quick one may still hit its limit on a loaded
    machine: that is a timeout at the limit, counted in ``o.late_tools``, not a break."""
    for e in o.events:
        if not isinstance(e, ToolExecuted):
            continue
        want = p.tool_expectations.get(e.tool_use_id)
        got = "timeout" if e.timed_out else "error" if e.is_error else "ok"
        if got == "timeout" and want != "timeout" and e.duration >= TOOL_LIMITS[e.name]:
            o.late_tools += 1
            continue
        if want is not None and want != got:
            said = e.output[:200]
            yield f"tool {e.name} ({e.tool_use_id}) ended {got}, expected {want}: {said!r}"


def _problems_keys(o: Outcome) -> Iterator[str]:
    texts = [("state", json.dumps(unstructure(o.state)))]
    texts += [(f"event {e.type}", json.dumps(e.to_dict())) for e in o.events]
    if o.state.diagnostic is not None:
        texts.append(("diagnostic", json.dumps(o.state.diagnostic)))
    for where, text in texts:
        for key in KEYS:
            if key in text or key[-16:] in text:
                yield f"an API key in the {where}"
                return


def check_run(o: Outcome, p: Plan, harness: Harness) -> list[str]:
    """Every broken invariant of one finished run (empty: all hold)."""
    checks = (
        _problems_final(o, harness),
        _problems_history(o),
        _problems_counters(o, harness),
        _problems_backoff(o, harness),
        _problems_tools(o, p),
        _problems_keys(o),
    )
    out: list[str] = []
    for problems in checks:
        try:
            out += list(problems)
        except Exception as exc:  # a check that cannot even run is a break too
            out.append(f"invariant check raised {exc!r}")
    return out


# -- per wave: processes, warnings, logs, loop errors ------------------------------------------


def descendants(tag: str | None = None) -> list[tuple[int, str]]:
    """Live processes descending from this one (only run ``tag``'s, if given):
    (pid, command line)."""
    parents: dict[int, list[int]] = collections.defaultdict(list)
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_bytes()
        except OSError:
            continue
        parents[int(stat.rsplit(b")", 1)[1].split()[1])].append(int(name))
    found, todo = [], [os.getpid()]
    # a run's processes carry its marker; the others (a test's database server) are not ours
    marker = f"CHAOS_RUN={tag}\0".encode() if tag is not None else b"CHAOS_RUN="
    while todo:
        for kid in parents.get(todo.pop(), ()):
            todo.append(kid)
            try:
                if marker not in Path(f"/proc/{kid}/environ").read_bytes():
                    continue
                cmd = Path(f"/proc/{kid}/cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue  # gone meanwhile
            found.append((kid, cmd.decode(errors="replace").strip()))
    return found


async def leftovers(tag: str | None = None, grace: float = 2.0) -> list[tuple[int, str]]:
    """The processes still there after ``grace`` seconds."""
    deadline = time.monotonic() + grace
    while True:
        left = descendants(tag)
        if not left or time.monotonic() > deadline:
            return left
        await asyncio.sleep(0.05)


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[str] = []
        self.keys_seen: list[str] = []
        """innerloop's own records, checked for API keys by the campaign."""

    def emit(self, record: logging.LogRecord) -> None:
        # innerloop's own log reports the recoveries and failures the campaign provokes on
        # purpose (and is checked for keys apart); anything else logged is noise
        if record.name == "innerloop" or record.name.startswith("innerloop."):
            self.keys_seen.append(record.getMessage())
            return
        self.records.append(f"{record.name}: {record.getMessage()}"[:300])


@attrs.define
class Noise:
    """What a wave of runs said that no run should: warnings, log lines, loop errors."""

    warnings: list[warnings.WarningMessage] = attrs.Factory(list)
    logs: _Records = attrs.Factory(_Records)
    loop_errors: list[str] = attrs.Factory(list)
    unraisable: list[str] = attrs.Factory(list)

    def drain(self) -> list[str]:
        out = [f"warning {w.category.__name__}: {w.message}" for w in self.warnings]
        out += [f"logged {r}" for r in self.logs.records]
        out += [
            f"innerloop logged a key: {m[:120]}"
            for m in self.logs.keys_seen
            if any(key in m for key in KEYS)
        ]
        self.logs.keys_seen.clear()
        out += [f"asyncio: {m}" for m in self.loop_errors]
        out += [f"unraisable: {m}" for m in self.unraisable]
        self.warnings.clear()
        self.logs.records.clear()
        self.loop_errors.clear()
        self.unraisable.clear()
        return [m[:300] for m in out]


@contextlib.contextmanager
def listening(noise: Noise) -> Iterator[None]:
    old_hook = sys.unraisablehook
    root = logging.getLogger()
    sys.unraisablehook = lambda u: noise.unraisable.append(f"{u.exc_value!r} in {u.object!r}")
    root.addHandler(noise.logs)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        noise.warnings = caught
        try:
            yield
        finally:
            root.removeHandler(noise.logs)
            sys.unraisablehook = old_hook


@contextlib.contextmanager
def keys_in_environment() -> Iterator[None]:
    """The keys in this process's environment, as on a real host: a tool printing its
    environment must not show them."""
    names = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY")
    old = {n: os.environ.get(n) for n in names}
    os.environ.update(dict(zip(names, KEYS, strict=True)))
    try:
        yield
    finally:
        for n, v in old.items():
            if v is None:
                os.environ.pop(n, None)
            else:
                os.environ[n] = v


BUSY = """
import os, sys, time
deadline, parent = time.monotonic() + float(sys.argv[1]), int(sys.argv[2])
while time.monotonic() < deadline and os.getppid() == parent:
    sum(range(100_000))
"""
"""Spins a core until its deadline passes or the process that started it is gone."""


@contextlib.contextmanager
def busy_processes(n: int, seconds: float) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``n`` processes spinning a core each beside the block (a loaded machine), for at
    most ``seconds``: each stops by itself then, or as soon as this process is gone, and
    all are stopped when the block ends."""
    parent = str(os.getpid())
    procs = [subprocess.Popen([sys.executable, "-c", BUSY, str(seconds), parent]) for _ in range(n)]
    try:
        yield procs
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait()


# -- the campaign -----------------------------------------------------------------------------


@attrs.define
class Report:
    runs: int = 0
    seconds: float = 0.0
    breaks: list[Break] = attrs.Factory(list)
    exits: collections.Counter[str] = attrs.Factory(collections.Counter)
    aborts: int = 0
    outcomes: dict[int, tuple[Outcome, Plan, Harness]] = attrs.Factory(dict)
    """Each run's outcome, plan and harness (with ``keep=True``), to inspect or replay."""
    late_tools: int = 0
    """Quick process tools that hit their limit on a loaded machine (not a break)."""
    late_calls: int = 0
    """Model calls that hit the HTTP timeout on a loaded machine (not a break)."""
    steps: collections.Counter[str] = attrs.Factory(collections.Counter)
    routes: collections.Counter[tuple[str, str]] = attrs.Factory(collections.Counter)
    """Transitions (source, target) taken by the runs whose path does not depend on
    timing: no timed abort, no late call or tool."""

    @property
    def runs_per_second(self) -> float:
        return self.runs / self.seconds if self.seconds else 0.0

    @property
    def broken_seeds(self) -> list[int]:
        return sorted({b.seed for b in self.breaks})

    def summary(self, first: int = 5) -> str:
        lines = [
            f"{self.runs} runs in {self.seconds:.1f} s: {self.runs_per_second:.1f} runs/s, "
            f"{len(self.broken_seeds)} breaks",
            "exits: " + ", ".join(f"{k} {v}" for k, v in self.exits.most_common()),
            f"host aborts fired: {self.aborts}; late on a loaded machine: "
            f"{self.late_tools} quick commands, {self.late_calls} model calls; steps served: "
            + ", ".join(f"{k} {v}" for k, v in self.steps.most_common()),
        ]
        for seed in self.broken_seeds[:first]:
            whats = [b.what for b in self.breaks if b.seed == seed]
            lines.append(f"seed {seed}: " + "; ".join(whats[:4]))
        return "\n".join(lines)


def _make_providers(servers: dict[str, LoopbackServer]) -> dict[str, Any]:
    """The four providers every run shares: both dialects, both routes."""
    providers: dict[str, Any] = {}
    for name in PROVIDERS:
        dialect, route = name.split("_")
        cls = AnthropicProvider if dialect == "anthropic" else OpenAIProvider
        providers[name] = cls(
            ANTHROPIC_KEY if dialect == "anthropic" else OPENAI_KEY,
            base_url=servers[dialect].base_url,
            name=name,
            timeout=HTTP_TIMEOUT,
            transport=AsyncioTransport() if route == "wire" else None,
            max_event_bytes=MAX_EVENT_BYTES,
        )
    return providers


async def _warm_up(providers: dict[str, Any], board: Board) -> None:
    """One call on each provider first: the SDKs import their types at the first request,
    which takes seconds on a loaded machine, and must not count against a run's timeout."""
    for k, name in enumerate(providers):
        tag = f"chaos-run-{10**12 + k}"
        board.put(tag, [reply("warm")])
        params = HarnessParams(model=f"{name}:{MODELS[name.split('_')[0]]}", system=tag)
        state = await Harness(params, providers, gates=RateLimitGates()).run("warm up")
        board.remove(tag)
        if state.exit_reason != "model_complete":
            ended = f"{state.exit_reason}: {state.error}"
            raise RuntimeError(f"the warm-up run on {name} ended {ended}")


@attrs.define
class _Campaign:
    board: Board
    providers: dict[str, Any]
    workspace: str
    noise: Noise
    report: Report
    keep: bool = False
    observers: Sequence[TransitionObserver] = ()
    in_flight: set[int] = attrs.Factory(set)
    machine: CompiledMachine = attrs.Factory(lambda: compile_spec(DEFAULT_SPEC))
    counter: TiktokenCounter = attrs.Factory(TiktokenCounter)

    async def one(self, seed: int, slot: str, tools: tuple[ToolSpec, ...]) -> None:
        p = plan(seed)
        harness = Harness(
            _params(p, tools),
            self.providers,
            machine=self.machine,
            clock=FakeClock(),
            token_counter=self.counter,
            observers=self.observers,
            gates=RateLimitGates(),  # each run its own: the invariants are per run
        )
        self.in_flight.add(seed)
        try:
            o = await play(p, harness, self.board)
        except BaseException as exc:
            o = None
            self.report.breaks.append(Break(seed, f"the run raised {exc!r}"))
        finally:
            self.in_flight.discard(seed)
        report = self.report
        report.runs += 1
        if o is not None:
            report.exits[str(o.state.exit_reason)] += 1
            report.aborts += o.abort_fired
            report.steps.update(type(s).__name__ for s in o.served)
            report.breaks += [Break(seed, what) for what in check_run(o, p, harness)]
            report.late_tools += o.late_tools
            report.late_calls += o.late_calls
            if not (p.timed_abort or o.late_tools or o.late_calls):
                report.routes.update(
                    (e.source, e.target) for e in o.events if isinstance(e, Transition)
                )
            if self.keep:
                report.outcomes[seed] = (o, p, harness)
        left = await leftovers(slot) if _spawns(p) else []
        if left:
            report.breaks.append(Break(seed, f"processes left behind: {left[:3]}"))
        said = self.noise.drain()
        if said:
            others = sorted(self.in_flight)[:8]
            report.breaks += [Break(seed, f"{w} (runs in flight: {others})") for w in said]


async def _campaign(
    seeds: Sequence[int],
    jobs: int,
    report: Report,
    progress: Callable[[Report], None] | None,
    keep: bool,
    observers: Sequence[TransitionObserver],
) -> None:
    board = Board()
    noise = Noise()
    servers = {"anthropic": _routed(AnthropicServer, board), "openai": _routed(OpenAIServer, board)}
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _, ctx: noise.loop_errors.append(str(ctx.get("message"))))
    with (
        tempfile.TemporaryDirectory(prefix="chaos-") as workspace,
        keys_in_environment(),
        servers["anthropic"],
        servers["openai"],
        listening(noise),
    ):
        providers = _make_providers(servers)
        await _warm_up(providers, board)
        campaign = _Campaign(board, providers, workspace, noise, report, keep, observers)
        slots: asyncio.Queue[tuple[str, tuple[ToolSpec, ...]]] = asyncio.Queue()
        for k in range(jobs):
            slots.put_nowait((f"slot-{k}", chaos_tools(workspace, f"slot-{k}")))

        async def gated(seed: int) -> None:
            slot = await slots.get()
            try:
                await campaign.one(seed, *slot)
            finally:
                slots.put_nowait(slot)
            if progress is not None:
                progress(report)

        try:
            await asyncio.gather(*(gated(s) for s in seeds))
        finally:
            for provider in providers.values():
                await provider.aclose()
        gc.collect()  # unclosed sockets or transports warn when collected
        left = await leftovers()
        if left:
            report.breaks.append(Break(-1, f"processes left at the end: {left[:3]}"))
    for w in noise.drain():  # anything said while shutting down
        report.breaks.append(Break(-1, w))


def run_campaign(
    runs: int,
    *,
    seed: int = 0,
    jobs: int = 8,
    progress: Callable[[Report], None] | None = None,
    keep: bool = False,
    observers: Sequence[TransitionObserver] = (),
) -> Report:
    """``runs`` runs, seeds ``seed`` to ``seed + runs - 1``, ``jobs`` at a time; with
    ``keep``, each run's outcome stays in ``report.outcomes``; ``observers`` watch every
    run's transitions."""
    report = Report()
    started = time.monotonic()
    try:
        asyncio.run(_campaign(range(seed, seed + runs), jobs, report, progress, keep, observers))
    finally:
        report.seconds = time.monotonic() - started
    return report
