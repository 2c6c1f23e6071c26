"""Compactors one case at a time: planning, transcripts, summaries and their failures."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from innerloop._messages import (
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from innerloop.lowlevel import marker_text, plan_cut, render_transcript
from innerloop.recovery import (
    ApproxTokenCounter,
    CompactionRequest,
    CompactionResult,
    MessageTokenCache,
    SummarizerError,
    SummarizingCompactor,
    TruncatingCompactor,
)
from innerloop.recovery._compaction import SUMMARY_HEADER
from innerloop.testing import FakeProvider, Fault, ScriptedProvider, reply

LOOP = [
    Message.user("find the bug " + "x" * 400),
    Message.assistant([ThinkingBlock("hmm", "s1"), ToolUseBlock("t1", "grep", {"q": "bug"})]),
    Message.user([ToolResultBlock("t1", "line 3: bug " + "y" * 400)]),
    Message.assistant([ThinkingBlock("so", "s2"), ToolUseBlock("t2", "read", {"path": "a.py"})]),
    Message.user([ToolResultBlock("t2", "print(1)")]),
]


def tokens() -> MessageTokenCache:
    return MessageTokenCache(ApproxTokenCounter())


def compact(compactor: Any, history: list[Message], target: int, keep: int = 2) -> Any:
    request = CompactionRequest(tuple(history), target, "budget", keep)
    result: CompactionResult = asyncio.run(compactor.compact(request, tokens()))
    return result


class TestPlanCut:
    def test_cut_inside_a_tool_loop_turns_orphaned_results_into_text(self) -> None:
        """Cutting away a tool call turns its result into text; the latest call, its
        thinking and its result stay verbatim."""
        result = compact(TruncatingCompactor(), LOOP, 300)
        assert result.history == (
            Message.user(
                [
                    LOOP[0].content[0],
                    TextBlock(marker_text(2, "budget")),
                    TextBlock("[result of a compacted tool call]: line 3: bug " + "y" * 400),
                ]
            ),
            LOOP[3],
            LOOP[4],
        )

    def test_smallest_fitting_cut_wins(self) -> None:
        """When several cuts fit, the one removing least is taken."""
        history = [Message.user("a"), Message.assistant("b")] * 4 + [Message.user("end")]
        assert plan_cut(history, 10_000, tokens(), 2) == 2

    def test_never_cuts_the_latest_assistant_turn(self) -> None:
        """Even with keep_recent=0 the newest two messages stay."""
        history = [Message.user("a"), Message.assistant("b"), Message.user("c")]
        assert plan_cut(history, 0, tokens(), 0) == 0
        history += [Message.assistant("d")]
        assert plan_cut(history, 0, tokens(), 0) == 0


class TestTask:
    def test_the_task_survives_two_compactions(self) -> None:
        """The first user message opens the kept history, before the marker, however
        often the history is compacted; the marker of an earlier compaction goes."""
        turns = [Message.assistant("b" * 400), Message.user("c" * 400)] * 3
        history = [Message.user("the task"), *turns, Message.assistant("d")]
        first = compact(TruncatingCompactor(), history, 10, keep=1)
        assert first.history[0].content[:2] == (
            TextBlock("the task"),
            TextBlock(marker_text(first.removed, "budget")),
        )
        again = [*first.history, Message.user("e" * 400), Message.assistant("f")]
        second = compact(TruncatingCompactor(), again, 10, keep=1)
        assert second.removed > 0
        assert second.history[0].content[:2] == (
            TextBlock("the task"),
            TextBlock(marker_text(second.removed, "budget")),
        )

    def test_a_history_of_the_task_and_the_latest_turn_cannot_shrink(self) -> None:
        """With only the task before the kept turns, there is nothing to remove."""
        history = [Message.user("t" * 400), Message.user("u"), Message.assistant("v")]
        history += [Message.user("w"), Message.assistant("x")]
        assert plan_cut(history, 0, tokens(), 0) == 0
        assert plan_cut(history, 0, tokens(), 0, keep_task=False) == 1

    def test_the_users_choice_drops_the_task(self) -> None:
        """keep_task=False (the user's own say) compacts the task away like any message."""
        result = compact(TruncatingCompactor(keep_task=False), LOOP, 300)
        assert result.history[0].content[0] == TextBlock(marker_text(2, "budget"))


class TestTranscript:
    def test_renders_roles_calls_results_and_images(self) -> None:
        """Tool calls and results are named, images noted, thinking left out, long results
        cut."""
        history = [
            Message.user([TextBlock("look"), ImageBlock("image/png", "iVBORw0KGgo=")]),
            Message.assistant(
                [ThinkingBlock("secret", "s"), ToolUseBlock("t1", "grep", {"q": "é"})]
            ),
            Message.user([ToolResultBlock("t1", "0123456789", is_error=True)]),
        ]
        assert render_transcript(history, result_chars=4) == (
            "USER:\nlook\n[image (image/png)]\n\n"
            'ASSISTANT:\n[calls tool grep with {"q":"é"}]\n\n'
            "USER:\n[tool error of grep]: 0123 [...]"
        )


class TestSummarizingCompactor:
    def test_long_summary_is_trimmed_to_its_reserve(self) -> None:
        """A summary longer than its share of the target is cut to fit."""
        provider = FakeProvider(lambda request: reply("word " * 1000))
        compactor = SummarizingCompactor(provider, "cheap", summary_tokens=50)
        result = compact(compactor, LOOP, 400)
        summary_block = result.history[0].content[2]
        assert isinstance(summary_block, TextBlock)
        assert summary_block.text.startswith(SUMMARY_HEADER + "word word")
        assert summary_block.text.endswith(" [...]")
        assert ApproxTokenCounter().count_text(summary_block.text) <= 50
        assert tokens().count_history(result.history) <= 400

    def test_empty_summary_is_a_failure(self) -> None:
        """A blank answer raises, so the fallback compactor takes over."""
        compactor = SummarizingCompactor(FakeProvider(lambda request: reply("  ")), "cheap")
        with pytest.raises(SummarizerError, match="returned no summary text"):
            compact(compactor, LOOP, 300)

    def test_provider_failure_propagates(self) -> None:
        """A failed call is not swallowed by the compactor itself."""
        compactor = SummarizingCompactor(ScriptedProvider([Fault.overloaded()]), "cheap")
        with pytest.raises(Exception, match="Overloaded"):
            compact(compactor, LOOP, 300)

    def test_no_call_when_nothing_can_be_removed(self) -> None:
        """With no allowed cut, the summarizer is not called at all."""
        provider = ScriptedProvider([])
        result = compact(SummarizingCompactor(provider, "cheap"), LOOP[:3], 10)
        assert (result.removed, result.history, provider.requests) == (0, tuple(LOOP[:3]), [])
