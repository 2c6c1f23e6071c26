"""Random valid histories and the validity rules a compacted history must keep."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from hypothesis import strategies as st

from innerloop._messages import (
    Block,
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from innerloop.lowlevel import normalize
from innerloop.testing import assert_valid_history

WORDS = st.text(alphabet="abcdefghij klmnop,.\n", min_size=0, max_size=120)
IMAGE = ImageBlock("image/png", "iVBORw0KGgo=")


@st.composite
def histories(draw: st.DrawFn, max_turns: int = 14) -> list[Message]:
    """A valid history: alternating, starting with user, every tool_use answered by one
    tool_result in the next user message. It may end with an assistant message that calls
    no tools (as after a max_tokens turn)."""
    ids = itertools.count(1)
    history = [Message.user(_user_blocks(draw))]
    for _ in range(draw(st.integers(0, max_turns))):
        blocks: list[Block] = []
        if draw(st.booleans()):
            blocks.append(ThinkingBlock(draw(WORDS), f"sig{next(ids)}"))
        if draw(st.booleans()):
            blocks.append(TextBlock(draw(WORDS) or "ok"))
        calls = [
            ToolUseBlock(f"toolu_{next(ids)}", "echo", {"x": draw(WORDS)})
            for _ in range(draw(st.integers(0, 3)))
        ]
        blocks += calls
        if not blocks:
            blocks.append(TextBlock("ok"))
        history.append(Message.assistant(blocks))
        if calls:
            results: list[Block] = [
                ToolResultBlock(c.id, draw(WORDS), draw(st.booleans())) for c in calls
            ]
            if draw(st.booleans()):
                results.append(TextBlock(draw(WORDS) or "note"))
            history.append(Message.user(results))
        elif draw(st.integers(0, 4)):
            history.append(Message.user(_user_blocks(draw)))
        else:
            break
    return history


def _user_blocks(draw: st.DrawFn) -> list[Block]:
    blocks: list[Block] = [TextBlock(draw(WORDS) or "hi")]
    if draw(st.integers(0, 4)) == 0:
        blocks.append(IMAGE)
    return blocks


def assert_valid(history: Sequence[Message]) -> None:
    """The history is valid for both providers (raises AssertionError naming the rule)."""
    assert history, "empty history"
    assert_valid_history(history)  # canonical rules: user first, alternation, pairs
    anthropic = normalize(history, "anthropic")
    assert anthropic[0]["role"] == "user"
    for before, after in itertools.pairwise(anthropic):
        assert before["role"] != after["role"]
    openai = normalize(history, "openai")
    open_calls: set[str] = set()
    for wire in openai:
        if wire["role"] == "tool":
            assert wire["tool_call_id"] in open_calls, "openai tool message without a call"
            open_calls.discard(wire["tool_call_id"])
        else:
            assert not open_calls, f"openai calls {open_calls} left unanswered"
            open_calls = {c["id"] for c in wire.get("tool_calls", ())}
    assert not open_calls
