"""HarnessParams rejects bad values and incompatible settings at construction."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import pytest

from innerloop import HarnessParams, ModelChoice, ParamsError, SpendBudget, Thinking, ToolSpec
from innerloop.recovery import RecoveryPolicy
from innerloop.tools import ToolContext, ToolOutput

M = "anthropic:claude-sonnet-4-5-20250929"


async def _noop(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    return ToolOutput("")


def _tool(name: str) -> ToolSpec:
    return ToolSpec(name, "d", {"type": "object"}, _noop)


@pytest.mark.parametrize(
    ("kwargs", "field", "message"),
    [
        ({"max_turns": 0}, "max_turns", "max_turns: must be an integer >= 1, got 0"),
        (
            {"thinking": Thinking(2048), "temperature": 0.7},
            "temperature",
            "temperature: extended thinking is incompatible with temperature 0.7; "
            "leave temperature unset",
        ),
        (
            {"thinking": Thinking(2048), "tools": [_tool("a")], "tool_choice": "tool:a"},
            "tool_choice",
            "tool_choice: extended thinking is incompatible with a forced tool choice "
            "('tool:a'); use 'auto' or 'none'",
        ),
        (
            {"thinking": Thinking(4096), "max_output_tokens": 4096},
            "max_output_tokens",
            "max_output_tokens: must exceed thinking.budget_tokens (4096), got 4096",
        ),
        (
            {"tools": [_tool("a"), _tool("a")]},
            "tools",
            "tools: duplicate tool name 'a'",
        ),
        (
            {"fallbacks": [M]},
            "fallbacks[0]",
            f"fallbacks[0]: repeats the primary model ({M})",
        ),
        (
            {"fallbacks": ["openai:gpt-4o-2024-08-06", "openai:gpt-4o-2024-08-06"]},
            "fallbacks[1]",
            "fallbacks[1]: repeats a model (openai:gpt-4o-2024-08-06)",
        ),
        (
            {"tool_choice": "tool:missing", "tools": [_tool("a")]},
            "tool_choice",
            "tool_choice: forces unknown tool 'missing'; known tools: a",
        ),
        ({"temperature": 3.0}, "temperature", "temperature: must be between 0 and 2, got 3.0"),
        (
            {"context_budget": 1000, "max_output_tokens": 2000},
            "context_budget",
            "context_budget: must exceed max_output_tokens (2000), got 1000",
        ),
        (
            {"strict_models": True, "model": "anthropic:claude-sonnet-4-5"},
            "model",
            "model: strict_models refuses the undated alias 'claude-sonnet-4-5'; pin a dated "
            "model id (e.g. 'claude-sonnet-4-5-20250929')",
        ),
        (
            {"tool_timeouts": {"shell": 0}},
            "tool_timeouts['shell']",
            "tool_timeouts['shell']: must be > 0, got 0",
        ),
    ],
)
def test_rejected(kwargs: dict[str, Any], field: str, message: str) -> None:
    """Each bad combination raises one ParamsError naming the field and the reason."""
    kwargs.setdefault("model", M)
    with pytest.raises(ParamsError) as info:
        HarnessParams(**kwargs)
    assert info.value.field == field
    assert str(info.value) == message


def test_nested_values_validated() -> None:
    """Thinking, spend budget and recovery numbers validate themselves."""
    with pytest.raises(ParamsError, match=r"thinking.budget_tokens: must be an integer >= 1024"):
        Thinking(100)
    with pytest.raises(ParamsError, match=r"spend_budget.max_cost_usd: must be > 0"):
        SpendBudget(max_cost_usd=0)
    with pytest.raises(ParamsError, match=r"recovery.budget_compact_target: must be between"):
        RecoveryPolicy(budget_compact_target=1.5)


def test_model_parse_error() -> None:
    """A model without the provider prefix says which form is expected."""
    with pytest.raises(ParamsError, match=r"expected 'provider:model'"):
        HarnessParams(model="claude")


def test_params_are_immutable() -> None:
    """Nothing can change params mid-run: fields, tool tuple and timeouts are read-only."""
    p = HarnessParams(model=M, system="s", tools=[_tool("a")])
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        p.system = "changed"  # type: ignore[misc]
    assert isinstance(p.tools, tuple)
    with pytest.raises(TypeError):
        p.tool_timeouts["shell"] = 1  # type: ignore[index]


def test_defaults() -> None:
    """The mission's numbers are the defaults."""
    p = HarnessParams(model=M, fallbacks=["openai:gpt-4o-mini-2024-07-18"])
    assert dict(p.tool_timeouts) == {"file": 5.0, "shell": 30.0, "network": 15.0, "code": 60.0}
    assert p.model_chain == (
        ModelChoice("anthropic", "claude-sonnet-4-5-20250929"),
        ModelChoice("openai", "gpt-4o-mini-2024-07-18"),
    )
    r = p.recovery
    assert (r.backoff_initial, r.backoff_factor, r.backoff_max) == (1.0, 2.0, 64.0)
    assert (r.max_rate_limit_retries, r.transient_retries, r.tool_failure_threshold) == (5, 1, 3)
    assert (r.max_tokens_compact_fraction, r.budget_compact_target) == (0.6, 0.7)
    assert r.overflow_compact_target == 0.5
