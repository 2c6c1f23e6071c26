"""Each recovery path of the assemble/compact phases through the Harness, with scripted
providers: the exact history the model sees and the exact events the host gets."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from innerloop import HarnessParams
from innerloop._events import Alert, Compacted, Event, Transition
from innerloop._messages import Message, TextBlock, Usage
from innerloop.fsm import HarnessState
from innerloop.fsm._params import SpendBudget
from innerloop.lowlevel import marker_text, normalize
from innerloop.recovery import (
    MessageTokenCache,
    Price,
    RecoveryPolicy,
    SummarizingCompactor,
    TiktokenCounter,
)
from innerloop.recovery._compaction import SUMMARY_HEADER
from innerloop.recovery._policy import CONTINUATION_MESSAGE
from innerloop.testing import FakeProvider, Fault, ScriptedProvider, reply, thinking, tool_call
from innerloop.tools import ToolContext, ToolOutput, ToolSpec

BIG = "lorem ipsum dolor sit amet " * 120
TOKENS = MessageTokenCache(TiktokenCounter())
KEEP_TWO = RecoveryPolicy(keep_recent_messages=2)


def seeded() -> list[Message]:
    """A history whose first answer holds most of its tokens."""
    return [
        Message.user("task: fix it"),
        Message.assistant("ack 1 " + BIG),
        Message.user("second"),
        Message.assistant("ack 2"),
        Message.user("question"),
    ]


def compacted(reason: str, summary: str | None = None) -> list[Message]:
    """``seeded()`` after a cut at message 2: the task kept, then the marker."""
    lead = [TextBlock("task: fix it"), TextBlock(marker_text(2, reason))]
    if summary is not None:
        lead.append(TextBlock(SUMMARY_HEADER + summary))
    return [
        Message.user((*lead, TextBlock("second"))),
        Message.assistant("ack 2"),
        Message.user("question"),
    ]


def tokens(history: Sequence[Message], system: str = "sys") -> int:
    return TOKENS.count_static(system, ()) + TOKENS.count_history(history)


def run_events(make_harness: Any, params: HarnessParams, provider: Any, **kw: Any) -> Any:
    """Run over ``seeded()``; the final state and the transition/compacted/alert events."""
    events: list[Event] = []
    harness = make_harness(params, provider, **kw)
    state = harness.run_sync(state=HarnessState(history=seeded()), on_event=events.append)
    return state, [e for e in events if isinstance(e, Transition | Compacted | Alert)]


def path(*hops: tuple[str, str, str | None]) -> list[Transition]:
    return [Transition(*hop) for hop in hops]


TAIL = path(
    ("assemble", "normalize", None),
    ("normalize", "call", None),
    ("call", "stream", "call_opened"),
    ("stream", "check", None),
    ("check", "model_complete", "model_finished"),
)


def budget_params(**kw: Any) -> HarnessParams:
    return HarnessParams(
        model="scripted:m",
        system="sys",
        max_output_tokens=256,
        context_budget=400,
        recovery=KEEP_TWO,
        **kw,
    )


class TestBudget:
    def test_over_budget_compacts_to_seventy_percent_before_the_call(
        self, make_harness: Any
    ) -> None:
        """Over the context budget, the history is cut before the call, and the model
        sees the compacted history."""
        provider = ScriptedProvider([reply("done")])
        state, events = run_events(make_harness, budget_params(), provider)
        expected = compacted("budget")
        assert state.exit_reason == "model_complete"
        assert state.history == [*expected, Message.assistant("done")]
        assert tokens(expected) <= 0.7 * 400
        assert events == [
            *path(("idle", "assemble", None), ("assemble", "compact", "over_context_budget")),
            Compacted("budget", tokens(seeded()), tokens(expected), 2),
            *path(("compact", "assemble", None)),
            *TAIL,
        ]
        assert provider.requests[0].payload["messages"] == normalize(expected, "anthropic")

    def test_history_that_cannot_shrink_fails_with_a_diagnostic(self, make_harness: Any) -> None:
        """A history with nothing removable that is still over budget ends the run."""
        params = budget_params()
        events: list[Event] = []
        harness = make_harness(params, ScriptedProvider([]))
        state = harness.run_sync("task: " + BIG, on_event=events.append)
        assert state.exit_reason == "failed"
        assert state.diagnostic["reason"] == "compaction could not shrink the history"
        assert [e for e in events if isinstance(e, Compacted)] == [
            Compacted("budget", tokens(state.history), tokens(state.history), 0)
        ]


class TestSummarizer:
    def test_summary_replaces_the_oldest_part_and_its_spend_is_booked(
        self, make_harness: Any
    ) -> None:
        """The summarizer's text opens the kept history; its usage and cost join the run's."""
        cheap = ScriptedProvider([reply("The user asked X.", usage=Usage(100, 20))], name="cheap")
        params = budget_params(prices={"m": Price(0.0, 0.0), "cheap-model": Price(1.0, 5.0)})
        compactor = SummarizingCompactor(cheap, "cheap-model")
        provider = ScriptedProvider([reply("done", usage=Usage(10, 5))])
        state, events = run_events(make_harness, params, provider, compactor=compactor)
        expected = compacted("budget", "The user asked X.")
        assert state.history == [*expected, Message.assistant("done")]
        assert events[2] == Compacted("budget", tokens(seeded()), tokens(expected), 2)
        assert state.usage == Usage(110, 25)
        assert state.cost_usd == (100 * 1.0 + 20 * 5.0) / 1_000_000
        transcript = cheap.requests[0].payload["messages"][0]["content"][0]["text"]
        assert transcript == (
            "<transcript>\nUSER:\ntask: fix it\n\nASSISTANT:\nack 1 " + BIG + "\n</transcript>"
        )

    def test_failing_summarizer_falls_back_to_truncation(self, make_harness: Any) -> None:
        """When the summarizer fails, the deterministic compactor does the job and an alert
        says so."""
        cheap = ScriptedProvider([Fault.server_error()], name="cheap")
        compactor = SummarizingCompactor(cheap, "cheap-model")
        provider = ScriptedProvider([reply("done")])
        state, events = run_events(make_harness, budget_params(), provider, compactor=compactor)
        expected = compacted("budget")
        assert state.history == [*expected, Message.assistant("done")]
        assert events == [
            *path(("idle", "assemble", None), ("assemble", "compact", "over_context_budget")),
            Alert(
                "compactor_failed",
                "ProviderError: cheap HTTP 500 transient: internal server error; "
                "the deterministic compactor took over",
            ),
            Compacted("budget", tokens(seeded()), tokens(expected), 2),
            *path(("compact", "assemble", None)),
            *TAIL,
        ]


def echo_tool(calls: list[Mapping[str, Any]]) -> ToolSpec:
    async def echo(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        calls.append(args)
        return ToolOutput("echo:" + str(args.get("x", "")))

    schema = {"type": "object", "properties": {"x": {"type": "string"}}}
    return ToolSpec("echo", "Echo", schema, echo)


class TestMaxTokens:
    def truncated_run(
        self, make_harness: Any, partial: str = "partial", **kw: Any
    ) -> tuple[Any, Any, list[Any]]:
        calls: list[Mapping[str, Any]] = []
        params = HarnessParams(
            model="scripted:m", system="sys", tools=[echo_tool(calls)], recovery=KEEP_TWO, **kw
        )
        provider = ScriptedProvider(
            [
                reply(
                    partial,
                    tool_call("echo", {"x": "a"}),
                    stop_reason="max_tokens",
                    incomplete_tool=("echo", '{"x": "tr'),
                ),
                reply("done"),
            ]
        )
        state, events = run_events(make_harness, params, provider)
        assert calls == []
        assert state.turns == 2
        return params, state, events

    def test_truncated_turn_without_pressure_drops_nothing(self, make_harness: Any) -> None:
        """On max_tokens with no context budget to press, nothing is dropped: the
        continuation message follows the whole history, and no tool call of the truncated
        turn runs."""
        params, state, events = self.truncated_run(make_harness)
        static = TOKENS.count_static("sys", params.tool_definitions)
        before = [*seeded(), Message.assistant("partial")]
        expected = [*before, Message.user(CONTINUATION_MESSAGE)]
        assert state.history == [*expected, Message.assistant("done")]
        assert events == [
            *path(
                ("idle", "assemble", None),
                ("assemble", "normalize", None),
                ("normalize", "call", None),
                ("call", "stream", "call_opened"),
                ("stream", "compact", "truncated"),
            ),
            Compacted(
                "max_tokens",
                static + TOKENS.count_history(before),
                static + TOKENS.count_history(expected),
                0,
            ),
            *path(("compact", "assemble", None)),
            *TAIL,
        ]

    def test_truncated_turn_under_pressure_compacts_and_keeps_the_task(
        self, make_harness: Any
    ) -> None:
        """On max_tokens with the history over the context budget, the oldest 60% is
        compacted, the task kept at its head, and the continuation message follows."""
        partial = "partial " * 200
        params, state, events = self.truncated_run(
            make_harness, partial, context_budget=800, max_output_tokens=256
        )
        static = TOKENS.count_static("sys", params.tool_definitions)
        before = [*seeded(), Message.assistant(partial)]
        assert static + TOKENS.count_history(seeded()) < 800
        assert static + TOKENS.count_history(before) > 800
        expected = [
            *compacted("max_tokens"),
            Message.assistant(partial),
            Message.user(CONTINUATION_MESSAGE),
        ]
        assert state.history == [*expected, Message.assistant("done")]
        assert next(e for e in events if isinstance(e, Compacted)).removed_messages == 2

    def test_eagerly_started_calls_of_a_truncated_turn_are_cancelled(
        self, make_harness: Any
    ) -> None:
        """With eager tools, a call dispatched while the truncated turn streamed is
        cancelled when the turn is discarded: it never runs."""
        started: list[str] = []

        async def record(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
            started.append(ctx.tool_use_id)
            return ToolOutput("ran")

        tool = ToolSpec("record", "Records its runs.", {"type": "object"}, record)
        params = HarnessParams(model="scripted:m", tools=[tool], eager_tools=True)
        script = iter(
            [
                reply("partial", tool_call("record", id="r1"), stop_reason="max_tokens"),
                reply("done"),
            ]
        )

        async def yielding(request: Any) -> Any:
            await asyncio.sleep(0)  # where a dispatched call would get to run
            return next(script)

        provider = FakeProvider(yielding)
        state = make_harness(params, [provider]).run_sync("go")
        assert started == []
        assert state.history == [
            Message.user("go"),
            Message.assistant("partial"),
            Message.user(CONTINUATION_MESSAGE),
            Message.assistant("done"),
        ]


class TestOverflow:
    def test_overflow_alerts_compacts_to_half_and_replays_the_turn(self, make_harness: Any) -> None:
        """A context overflow raises an alert, compacts to half of what was counted and
        sends the same turn again."""
        params = HarnessParams(model="scripted:m", system="sys", recovery=KEEP_TWO)
        provider = ScriptedProvider([Fault.context_overflow(), reply("done")])
        state, events = run_events(make_harness, params, provider)
        expected = compacted("overflow")
        counted = tokens(seeded())
        assert state.history == [*expected, Message.assistant("done")]
        assert tokens(expected) <= counted // 2
        assert events == [
            *path(
                ("idle", "assemble", None),
                ("assemble", "normalize", None),
                ("normalize", "call", None),
                ("call", "compact", "context_overflow"),
            ),
            Alert(
                "context_overflow",
                "the provider rejected the prompt as too long although it was counted at "
                f"{counted} tokens: the token counter is wrong; emergency compaction",
            ),
            Compacted("overflow", counted, tokens(expected), 2),
            *path(("compact", "assemble", None)),
            *TAIL,
        ]
        first, second = (r.payload["messages"] for r in provider.requests)
        question = {"role": "user", "content": [{"type": "text", "text": "question"}]}
        assert first[-1] == second[-1] == question
        assert state.turns == 1


def looping(n: int, usage: Usage) -> list[Any]:
    """``n`` turns that each call the echo tool (with some thinking first)."""
    return [
        reply(thinking(f"step {i}"), tool_call("echo", {"x": str(i)}), usage=usage)
        for i in range(n)
    ]


class TestSpendBudget:
    def spend_run(self, make_harness: Any, budget: SpendBudget, usage: Usage, **kw: Any) -> Any:
        calls: list[Mapping[str, Any]] = []
        params = HarnessParams(
            model="scripted:m", tools=[echo_tool(calls)], spend_budget=budget, **kw
        )
        return make_harness(params, ScriptedProvider(looping(5, usage))).run_sync("go")

    def test_token_budget_ends_the_run(self, make_harness: Any) -> None:
        """Reaching the spend budget in tokens exits with budget_exceeded after that turn's
        tool results are in."""
        state = self.spend_run(make_harness, SpendBudget(max_tokens=30), Usage(10, 5))
        assert (state.exit_reason, state.turns, state.usage.total_tokens) == (
            "budget_exceeded",
            2,
            30,
        )
        assert state.history[-1].tool_results[0].content == "echo:1"

    def test_dollar_budget_ends_the_run(self, make_harness: Any) -> None:
        """Reaching the spend budget in dollars (from the price table) exits likewise."""
        state = self.spend_run(
            make_harness,
            SpendBudget(max_cost_usd=0.03),
            Usage(10, 5),
            prices={"m": Price(1000.0, 2000.0)},
        )
        assert (state.exit_reason, state.turns) == ("budget_exceeded", 2)
        assert state.cost_usd == 2 * (10 * 1000.0 + 5 * 2000.0) / 1_000_000

    def test_thinking_tokens_are_spent_at_the_output_rate(self, make_harness: Any) -> None:
        """Thinking tokens count in full at the output price: 100 output tokens of which
        80 thinking cost 100 output tokens."""
        usage = Usage(0, 100, thinking_tokens=80)
        state = self.spend_run(
            make_harness, SpendBudget(max_cost_usd=0.1), usage, prices={"m": Price(0.0, 1000.0)}
        )
        assert (state.exit_reason, state.turns) == ("budget_exceeded", 1)
        assert state.cost_usd == 100 * 1000.0 / 1_000_000

    def test_unpriced_model_under_a_dollar_budget_raises_an_alert(self, make_harness: Any) -> None:
        """A dollar budget over a model the price table lacks cannot fire: the host is
        told at the start of the run."""
        events: list[Event] = []
        params = HarnessParams(model="scripted:m", spend_budget=SpendBudget(max_cost_usd=1.0))
        state = make_harness(params, ScriptedProvider([reply("done")])).run_sync(
            "go", on_event=events.append
        )
        assert state.cost_usd is None
        assert [e for e in events if isinstance(e, Alert)] == [
            Alert(
                "unpriced_model",
                "no price for m in params.prices or genai-prices: the run's dollar cost is "
                "unknown, so spend_budget.max_cost_usd cannot end the run; add prices with "
                "HarnessParams(prices=merge_prices({'m': Price(input, output)}))",
            )
        ]
