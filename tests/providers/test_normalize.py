"""normalize / build_request: each provider's structural rules hold for any valid canonical
history, also when the history was made under the other provider (fallback)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from innerloop import HarnessParams
from innerloop._messages import (
    Block,
    ImageBlock,
    Message,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from innerloop.fsm import request_settings
from innerloop.fsm._params import Thinking
from innerloop.lowlevel import build_request, normalize
from innerloop.tools import ToolContext, ToolOutput, ToolSpec, tool

ANTHROPIC_ID = re.compile(r"^[A-Za-z0-9_-]+$")
USER_TYPES = {"text", "image", "tool_result"}
ASSISTANT_TYPES = {"text", "thinking", "redacted_thinking", "tool_use"}

texts = st.text(min_size=0, max_size=12)
inputs = st.dictionaries(st.sampled_from(["a", "b", "path"]), st.integers() | st.text(max_size=5))


@st.composite
def histories(draw: st.DrawFn) -> list[Message]:
    """Valid canonical histories: every tool call answered in the next user turn; thinking
    signed (made by Anthropic) or not (made by an OpenAI-compatible server); tool ids in
    either provider's style; user turns sometimes split in two."""
    counter = iter(range(10_000))
    prefix = st.sampled_from(["toolu_", "call_", "call:", "fc.", "id-"])
    history = [Message.user(draw(texts) or "start")]
    for _ in range(draw(st.integers(0, 5))):
        blocks: list[Block] = []
        if draw(st.booleans()):
            blocks.append(ThinkingBlock(draw(texts), draw(st.sampled_from(["", "sig-Eq1"]))))
        if draw(st.booleans()):
            blocks.append(RedactedThinkingBlock("EmwKAhgB"))
        if draw(st.booleans()):
            blocks.append(TextBlock(draw(texts)))
        calls = [
            ToolUseBlock(
                f"{draw(prefix)}{next(counter)}", draw(st.sampled_from(["f", "g"])), draw(inputs)
            )
            for _ in range(draw(st.integers(0, 3)))
        ]
        history.append(Message.assistant((*blocks, *calls)))
        answer: list[Block] = [
            ToolResultBlock(c.id, draw(texts), draw(st.booleans())) for c in calls
        ]
        extra: list[Block] = []
        if draw(st.booleans()) or not answer:
            extra.append(TextBlock(draw(texts) or "go on"))
        if draw(st.booleans()):
            extra.append(ImageBlock("image/png", "iVBORw0KGgo="))
        split = draw(st.booleans())
        if answer and extra and split:
            history += [Message.user(answer), Message.user(extra)]
        else:
            history.append(Message.user(draw(st.permutations([*answer, *extra]))))
    return history


def check_anthropic(messages: list[dict[str, Any]]) -> None:
    """Anthropic's rules: user first, strict alternation, non-empty typed content, signed
    thinking, safe ids, tool results first in the very next user turn, matching exactly."""
    assert messages
    assert messages[0]["role"] == "user"
    ids = [b["id"] for m in messages for b in m["content"] if b["type"] == "tool_use"]
    assert len(ids) == len(set(ids)), "tool_use ids collide"
    for i, m in enumerate(messages):
        assert m["role"] == ("user" if i % 2 == 0 else "assistant")
        assert m["content"], f"message {i} is empty"
        allowed = USER_TYPES if m["role"] == "user" else ASSISTANT_TYPES
        for b in m["content"]:
            assert b["type"] in allowed
            if b["type"] == "text":
                assert b["text"]
            if b["type"] == "thinking":
                assert b["signature"]
            if b["type"] in ("tool_use", "tool_result"):
                assert ANTHROPIC_ID.match(b.get("id") or b.get("tool_use_id"))
        uses = [b["id"] for b in m["content"] if b["type"] == "tool_use"]
        results = [b["tool_use_id"] for b in m["content"] if b["type"] == "tool_result"]
        if m["role"] == "user":
            previous = messages[i - 1]["content"] if i else []
            assert sorted(results) == sorted(b["id"] for b in previous if b["type"] == "tool_use")
            types = [b["type"] for b in m["content"]]
            assert types == sorted(types, key=lambda t: t != "tool_result")
        elif uses:
            assert i + 1 < len(messages), "unanswered tool_use at the end"


def check_openai(messages: list[dict[str, Any]]) -> None:
    """OpenAI's rules: every assistant tool_calls is followed at once by one tool message
    per call id; tool messages appear nowhere else; no thinking; arguments are JSON."""
    pending: list[str] = []
    for m in messages:
        role = m["role"]
        if pending:
            assert role == "tool", f"{role} message before all tool results arrived"
            assert m["tool_call_id"] in pending
            pending.remove(m["tool_call_id"])
            assert isinstance(m["content"], str)
            continue
        assert role in ("system", "user", "assistant")
        if role == "assistant":
            assert set(m) <= {"role", "content", "tool_calls"}
            assert isinstance(m["content"], str)
            calls = m.get("tool_calls") or []
            assert m["content"] or calls
            for c in calls:
                assert c["type"] == "function"
                assert isinstance(json.loads(c["function"]["arguments"]), dict)
            pending = [c["id"] for c in calls]
        elif role == "user":
            content = m["content"]
            if not isinstance(content, str):
                assert {p["type"] for p in content} <= {"text", "image_url"}
    assert not pending


def _calls(history: list[Message]) -> list[tuple[str, str]]:
    return [(b.name, json.dumps(b.input, sort_keys=True)) for m in history for b in m.tool_uses]


@settings(max_examples=150)
@given(histories())
def test_anthropic_rules_hold(history: list[Message]) -> None:
    """Any valid history normalizes to a structurally valid Anthropic request."""
    wire = normalize(history, "anthropic")
    check_anthropic(wire)
    wire_calls = [
        (b["name"], json.dumps(b["input"], sort_keys=True))
        for m in wire
        for b in m["content"]
        if b["type"] == "tool_use"
    ]
    assert wire_calls == _calls(history)


@settings(max_examples=150)
@given(histories())
def test_openai_rules_hold(history: list[Message]) -> None:
    """Any valid history normalizes to a structurally valid OpenAI request."""
    wire = normalize(history, "openai")
    check_openai(wire)
    wire_calls = [
        (c["function"]["name"], json.dumps(json.loads(c["function"]["arguments"]), sort_keys=True))
        for m in wire
        for c in m.get("tool_calls") or ()
    ]
    assert wire_calls == _calls(history)


@settings(max_examples=100)
@given(histories(), st.integers(0, 12))
def test_switching_dialect_mid_history(history: list[Message], cut: int) -> None:
    """A history made under one provider and continued under the other (fallback) is valid
    for both, as a whole request with system prompt and tools."""
    params = HarnessParams(
        model="anthropic:claude-sonnet-4-5-20250929", system="sys", tools=(ECHO,)
    )
    head = history[: max(1, cut)]
    if head[-1].role == "assistant" and head[-1].tool_uses:
        head = head[:-1] or history[:1]
    for dialect in ("anthropic", "openai"):
        payload = build_request(request_settings(params), head, dialect, "m").payload
        (check_anthropic if dialect == "anthropic" else check_openai)(payload["messages"])
        assert payload["stream"] is True


async def _echo(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    return ToolOutput("")


ECHO = ToolSpec("echo", "Echo", {"type": "object", "properties": {}}, _echo)
HISTORY = [
    Message.user("hi"),
    Message.assistant(
        (
            ThinkingBlock("plan", "sig-1"),
            RedactedThinkingBlock("opaque"),
            TextBlock("calling"),
            ToolUseBlock("toolu_1", "echo", {"x": 1}),
        )
    ),
    Message.user((ToolResultBlock("toolu_1", "boom", True),)),
    Message.user("and then?"),
]


def test_anthropic_wire_of_a_tool_turn() -> None:
    """Thinking verbatim with signature, is_error carried, consecutive users merged."""
    assert normalize(HISTORY, "anthropic") == [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "plan", "signature": "sig-1"},
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "text", "text": "calling"},
                {"type": "tool_use", "id": "toolu_1", "name": "echo", "input": {"x": 1}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": "boom",
                    "is_error": True,
                },
                {"type": "text", "text": "and then?"},
            ],
        },
    ]


def test_openai_wire_of_the_same_turn() -> None:
    """Thinking dropped, assistant tool_calls, a tool message, then the user text."""
    assert normalize(HISTORY, "openai") == [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": "calling",
            "tool_calls": [
                {
                    "id": "toolu_1",
                    "type": "function",
                    "function": {"name": "echo", "arguments": '{"x":1}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": "[tool error] boom"},
        {"role": "user", "content": "and then?"},
    ]


def test_foreign_tool_ids_are_made_safe_without_collisions() -> None:
    """Ids Anthropic would reject are rewritten, distinctly, and results follow them."""
    history = [
        Message.user("x"),
        Message.assistant((ToolUseBlock("call:1", "f"), ToolUseBlock("call.1", "f"))),
        Message.user((ToolResultBlock("call:1", "a"), ToolResultBlock("call.1", "b"))),
    ]
    wire = normalize(history, "anthropic")
    uses = [b["id"] for b in wire[1]["content"]]
    assert len(set(uses)) == 2
    assert all(ANTHROPIC_ID.match(u) for u in uses)
    assert [b["tool_use_id"] for b in wire[2]["content"]] == uses


def test_cache_breakpoints() -> None:
    """System always carries cache_control; tools and the last user turn on request."""
    params = HarnessParams(
        model="anthropic:claude-sonnet-4-5-20250929",
        system="sys",
        tools=(ECHO,),
        cache_tools=True,
        cache_last_user_turn=True,
        thinking=Thinking(2048),
    )
    payload = build_request(
        request_settings(params), HISTORY, "anthropic", "claude-sonnet-4-5-20250929"
    ).payload
    cache = {"type": "ephemeral"}
    assert payload["system"] == [{"type": "text", "text": "sys", "cache_control": cache}]
    assert payload["tools"][-1]["cache_control"] == cache
    assert payload["messages"][-1]["content"][-1]["cache_control"] == cache
    assert payload["thinking"] == {"type": "enabled", "budget_tokens": 2048}


def test_openai_request_shape() -> None:
    """OpenAI gets a system message, function tools and usage in the stream."""
    params = HarnessParams(model="openai:gpt-4o-2024-08-06", system="sys", tools=(ECHO,))
    payload = build_request(
        request_settings(params), HISTORY, "openai", "gpt-4o-2024-08-06"
    ).payload
    assert payload["messages"][0] == {"role": "system", "content": "sys"}
    assert payload["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "echo",
                "description": "Echo",
                "parameters": {"type": "object", "properties": {}},
            },
        }
    ]
    assert payload["stream_options"] == {"include_usage": True}


@tool
def lookup(city: str, units: str = "metric") -> str:
    """Weather for a city.

    Args:
        city: The city.
        units: metric or imperial.
    """
    return city


def test_openai_gets_the_strict_form_of_decorated_tools_only() -> None:
    """A ``@tool`` schema goes to OpenAI in strict form (every property required, the
    optional one nullable, no extra properties); a hand-written one as it was given.
    Anthropic gets the plain schemas."""
    params = HarnessParams(model="openai:gpt-4o-2024-08-06", tools=(lookup, ECHO))
    settings = request_settings(params)
    tools = build_request(settings, HISTORY, "openai", "gpt-4o-2024-08-06").payload["tools"]
    strict = tools[0]["function"]
    assert strict["strict"] is True
    assert strict["parameters"]["required"] == ["city", "units"]
    assert strict["parameters"]["additionalProperties"] is False
    assert "null" in str(strict["parameters"]["properties"]["units"])
    assert tools[1]["function"] == {
        "name": "echo",
        "description": "Echo",
        "parameters": {"type": "object", "properties": {}},
    }
    anthropic = build_request(settings, HISTORY, "anthropic", "claude-sonnet-4-5-20250929")
    assert [set(t) for t in anthropic.payload["tools"]] == [
        {"name", "description", "input_schema"}
    ] * 2


def test_openai_calls_only_assistant_has_empty_content() -> None:
    """An assistant turn of calls alone goes out with ``"content": ""`` (a string, as
    OpenAI's schema takes; llama.cpp's server refuses null and its chat templates read
    the key, each with a 500)."""
    history = [
        Message.user("weather?"),
        Message.assistant((ToolUseBlock("c1", "weather", {"city": "Oslo"}),)),
        Message.user((ToolResultBlock("c1", "sunny"),)),
    ]
    wire = normalize(history, "openai")
    assert wire[1] == {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "weather", "arguments": '{"city":"Oslo"}'},
            }
        ],
    }
