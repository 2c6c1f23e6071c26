"""One ``thinking`` setting, sent to each model as its family takes it, checked at
construction."""

from __future__ import annotations

from typing import Any

import pytest

from innerloop import HarnessParams
from innerloop._errors import ParamsError
from innerloop._messages import Message
from innerloop.fsm import Thinking, request_settings
from innerloop.lowlevel import build_request
from innerloop.providers import OpenAIResponsesProvider
from innerloop.providers._reasoning import family_of
from innerloop.testing import ResponsesServer, reply


def _fields(
    model: str, dialect: str, thinking: Thinking, primary: str = "", **kw: Any
) -> dict[str, Any]:
    """The reasoning fields of a request to ``model`` (by default the primary model)."""
    params = HarnessParams(
        model=f"x:{primary or model}", thinking=thinking, max_output_tokens=8192, **kw
    )
    payload = build_request(request_settings(params), [Message.user("q")], dialect, model).payload
    keys = ("thinking", "output_config", "reasoning_effort", "reasoning")
    return {k: payload[k] for k in keys if k in payload}


class TestRequests:
    @pytest.mark.parametrize(
        ("model", "dialect", "thinking", "fields"),
        [
            (
                "claude-sonnet-4-5-20250929",
                "anthropic",
                Thinking(2048),
                {"thinking": {"type": "enabled", "budget_tokens": 2048}},
            ),
            (
                "claude-opus-4-6",
                "anthropic",
                Thinking(adaptive=True, effort="high"),
                {"thinking": {"type": "adaptive"}, "output_config": {"effort": "high"}},
            ),
            (
                "gpt-5-2025-08-07",
                "openai",
                Thinking(effort="minimal"),
                {"reasoning_effort": "minimal"},
            ),
            (
                "o3-2025-04-16",
                "responses",
                Thinking(effort="high"),
                {"reasoning": {"effort": "high", "summary": "auto"}},
            ),
            (
                "gpt-5-2025-08-07",
                "responses",
                Thinking(effort="low", summary=None),
                {"reasoning": {"effort": "low"}},
            ),
            ("llama-3.3-70b", "openai", Thinking(effort="low"), {"reasoning_effort": "low"}),
        ],
    )
    def test_each_family_gets_its_own_fields(
        self, model: str, dialect: str, thinking: Thinking, fields: dict[str, Any]
    ) -> None:
        """Budget, adaptive and effort become each API's own fields."""
        assert _fields(model, dialect, thinking) == fields

    def test_a_fallback_gets_only_what_it_takes(self) -> None:
        """Claude's budget is not sent to GPT-5, GPT-5's effort not to a Claude 4.5."""
        thinking = Thinking(2048, effort="medium")
        fallbacks = ("y:gpt-5-2025-08-07", "z:gpt-4o-2024-08-06")
        assert _fields("gpt-5-2025-08-07", "openai", thinking, fallbacks=fallbacks) == {
            "reasoning_effort": "medium"
        }
        assert _fields(
            "claude-sonnet-4-5-20250929", "anthropic", thinking, fallbacks=fallbacks
        ) == {"thinking": {"type": "enabled", "budget_tokens": 2048}}
        primary = "gpt-5-2025-08-07"
        to_gpt4o = _fields("gpt-4o-2024-08-06", "openai", thinking, primary, fallbacks=fallbacks)
        assert to_gpt4o == {}


class TestChecks:
    @pytest.mark.parametrize(
        ("model", "thinking", "message"),
        [
            (
                "claude-sonnet-4-5-20250929",
                Thinking(effort="high"),
                "thinking: claude-sonnet-4-5-20250929 (model, Claude 4) takes "
                "thinking.budget_tokens, which is unset",
            ),
            (
                "o3-2025-04-16",
                Thinking(2048),
                "thinking: o3-2025-04-16 (model, OpenAI o-series) takes thinking.effort, "
                "which is unset",
            ),
            (
                "gpt-5-2025-08-07",
                Thinking(effort="max"),
                "thinking.effort: gpt-5-2025-08-07 (model) takes effort minimal, low, medium, "
                "high, got 'max'",
            ),
            (
                "claude-sonnet-4-5-20250929",
                Thinking(adaptive=True),
                "thinking.adaptive: claude-sonnet-4-5-20250929 (model) has no adaptive "
                "thinking: give budget_tokens instead",
            ),
            (
                "gpt-4o-2024-08-06",
                Thinking(effort="low"),
                "thinking: gpt-4o-2024-08-06 does not reason: leave thinking=None or pick a "
                "reasoning model",
            ),
        ],
    )
    def test_a_setting_the_family_cannot_take_is_refused(
        self, model: str, thinking: Thinking, message: str
    ) -> None:
        """Each mismatch names the model, its family and what it takes."""
        with pytest.raises(ParamsError) as caught:
            HarnessParams(model=f"p:{model}", thinking=thinking, max_output_tokens=8192)
        assert str(caught.value) == message

    def test_a_fallback_checked_too(self) -> None:
        """A fallback's family is checked and named by its position."""
        with pytest.raises(ParamsError, match=r"o3-2025-04-16 \(fallbacks\[0\]\) takes effort"):
            HarnessParams(
                model="a:gpt-5-2025-08-07",
                fallbacks=["b:o3-2025-04-16"],
                thinking=Thinking(effort="minimal"),
            )

    def test_a_setting_is_needed(self) -> None:
        """Thinking with nothing set says what to set."""
        with pytest.raises(ParamsError, match="sets no reasoning: give budget_tokens"):
            Thinking()

    def test_adaptive_takes_no_budget(self) -> None:
        """adaptive and budget_tokens exclude each other."""
        with pytest.raises(ParamsError, match="adaptive thinking takes no budget"):
            Thinking(2048, adaptive=True)

    def test_unknown_effort(self) -> None:
        """An effort no family takes lists those there are."""
        with pytest.raises(ParamsError, match=r"thinking\.effort: must be one of none, minimal"):
            Thinking(effort="extreme")

    def test_families(self) -> None:
        """Dated ids resolve by prefix; an unknown model has no family."""
        family = family_of("claude-opus-4-6-20260101")
        assert family is not None
        assert family.adaptive
        assert family_of("mistral-large") is None


def test_effort_reaches_the_responses_api(make_harness: Any) -> None:
    """End to end: the Responses request carries the effort and asks for summaries."""
    params = HarnessParams(model="openai:gpt-5-2025-08-07", thinking=Thinking(effort="high"))
    with ResponsesServer([reply("ok")]) as server:
        provider = OpenAIResponsesProvider("sk-test-0123456789", base_url=server.base_url)
        state = make_harness(params, [provider]).run_sync("hi")
        body = server.requests[0].body
    assert state.exit_reason == "model_complete"
    assert body["reasoning"] == {"effort": "high", "summary": "auto"}
