"""HarnessParams: everything set once before the loop, validated at construction."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

import attrs

from innerloop._errors import ParamsError
from innerloop.recovery._policy import RecoveryPolicy
from innerloop.recovery._pricing import DEFAULT_PRICES, Price
from innerloop.tools._spec import DEFAULT_TIMEOUTS, ToolSpec

__all__ = ["HarnessParams", "ModelChoice", "SpendBudget", "Thinking"]

_DATED = re.compile(r"(\d{8}|\d{4}-\d{2}-\d{2})$")


@attrs.frozen
class ModelChoice:
    """A provider and a model id, e.g. ``ModelChoice("anthropic", "claude-sonnet-4-5-20250929")``.

    ``ModelChoice.parse("openai:gpt-4o-mini-2024-07-18")`` reads the ``provider:model`` form.
    """

    provider: str
    model: str

    @classmethod
    def parse(cls, value: str | ModelChoice) -> ModelChoice:
        if isinstance(value, ModelChoice):
            return value
        provider, sep, model = str(value).partition(":")
        if not sep or not provider or not model:
            raise ParamsError(
                "model", f"expected 'provider:model' (e.g. 'anthropic:claude-...'), got {value!r}"
            )
        return cls(provider, model)

    @property
    def dated(self) -> bool:
        return bool(_DATED.search(self.model))

    def __str__(self) -> str:
        return f"{self.provider}:{self.model}"


def _choice(value: str | ModelChoice) -> ModelChoice:
    return ModelChoice.parse(value)


def _choices(values: Iterable[str | ModelChoice]) -> tuple[ModelChoice, ...]:
    if isinstance(values, str | ModelChoice):
        values = (values,)
    return tuple(ModelChoice.parse(v) for v in values)


@attrs.frozen
class Thinking:
    """Extended thinking with a token budget (Anthropic's minimum is 1024)."""

    budget_tokens: int

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.budget_tokens, int) or self.budget_tokens < 1024:
            raise ParamsError(
                "thinking.budget_tokens",
                f"must be an integer >= 1024, got {self.budget_tokens!r}",
                self.budget_tokens,
            )


@attrs.frozen
class SpendBudget:
    """What one run may spend: total tokens and/or US dollars. Reaching either ends the run
    with ``budget_exceeded``. This is not the context budget (which triggers compaction)."""

    max_tokens: int | None = None
    max_cost_usd: float | None = None

    def __attrs_post_init__(self) -> None:
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ParamsError("spend_budget.max_tokens", f"must be >= 1, got {self.max_tokens}")
        if self.max_cost_usd is not None and self.max_cost_usd <= 0:
            raise ParamsError("spend_budget.max_cost_usd", f"must be > 0, got {self.max_cost_usd}")


def _tool_tuple(value: Iterable[ToolSpec]) -> tuple[ToolSpec, ...]:
    return tuple(value)


def _str_tuple(value: Iterable[str]) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


def _default_prices() -> Mapping[str, Price]:
    return DEFAULT_PRICES


def _readonly(value: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(value))


def _timeouts(value: Mapping[str, float]) -> Mapping[str, float]:
    merged = dict(DEFAULT_TIMEOUTS)
    merged.update(value)
    return MappingProxyType(merged)


@attrs.frozen(kw_only=True)
class HarnessParams:
    """Set once before the loop; immutable for the whole run.

    Every bad value or incompatible combination raises :class:`ParamsError` naming the
    field and the reason, here, at construction.
    """

    model: ModelChoice = attrs.field(converter=_choice)
    system: str = ""
    tools: tuple[ToolSpec, ...] = attrs.field(default=(), converter=_tool_tuple)
    fallbacks: tuple[ModelChoice, ...] = attrs.field(default=(), converter=_choices)
    temperature: float | None = None
    top_p: float | None = None
    max_output_tokens: int = 4096
    max_turns: int = 20
    context_budget: int | None = None
    """Tokens one request may hold; over it, history is compacted before the call."""
    spend_budget: SpendBudget | None = None
    """What the whole run may spend; reaching it ends the run."""
    tool_timeouts: Mapping[str, float] = attrs.field(factory=dict, converter=_timeouts)
    tool_choice: str = "auto"
    """``auto``, ``any``, ``none``, or ``tool:NAME`` to force one tool."""
    thinking: Thinking | None = None
    stop_sequences: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)
    recovery: RecoveryPolicy = RecoveryPolicy()
    prices: Mapping[str, Price] = attrs.field(factory=_default_prices, converter=_readonly)
    max_parallel_tools: int = 4
    eager_tools: bool = False
    strict_models: bool = False
    """Refuse undated model aliases (pin a dated id so behaviour cannot change silently)."""
    cache_tools: bool = False
    cache_last_user_turn: bool = False

    def __attrs_post_init__(self) -> None:
        chain = self.model_chain
        for i, choice in enumerate(chain):
            field = "model" if i == 0 else f"fallbacks[{i - 1}]"
            if self.strict_models and choice.provider != "scripted" and not choice.dated:
                raise ParamsError(
                    field,
                    f"strict_models refuses the undated alias {choice.model!r}; "
                    "pin a dated model id (e.g. 'claude-sonnet-4-5-20250929')",
                    choice,
                )
        seen: set[ModelChoice] = set()
        for i, choice in enumerate(chain):
            if choice in seen:
                what = "repeats the primary model" if choice == self.model else "repeats a model"
                raise ParamsError(f"fallbacks[{i - 1}]", f"{what} ({choice})", choice)
            seen.add(choice)
        if not isinstance(self.max_turns, int) or self.max_turns < 1:
            raise ParamsError("max_turns", f"must be an integer >= 1, got {self.max_turns!r}")
        if not isinstance(self.max_output_tokens, int) or self.max_output_tokens < 1:
            raise ParamsError(
                "max_output_tokens", f"must be an integer >= 1, got {self.max_output_tokens!r}"
            )
        if self.temperature is not None and not 0 <= self.temperature <= 2:
            raise ParamsError("temperature", f"must be between 0 and 2, got {self.temperature}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ParamsError("top_p", f"must be in (0, 1], got {self.top_p}")
        if self.context_budget is not None and self.context_budget <= self.max_output_tokens:
            raise ParamsError(
                "context_budget",
                f"must exceed max_output_tokens ({self.max_output_tokens}), "
                f"got {self.context_budget}",
            )
        if self.max_parallel_tools < 1:
            raise ParamsError("max_parallel_tools", f"must be >= 1, got {self.max_parallel_tools}")
        for category, seconds in self.tool_timeouts.items():
            if seconds <= 0:
                raise ParamsError(f"tool_timeouts[{category!r}]", f"must be > 0, got {seconds}")
        names: set[str] = set()
        for tool in self.tools:
            if not isinstance(tool, ToolSpec):
                raise ParamsError("tools", f"expected ToolSpec, got {type(tool).__name__}", tool)
            if tool.name in names:
                raise ParamsError("tools", f"duplicate tool name {tool.name!r}", tool.name)
            names.add(tool.name)
        self._check_tool_choice(names)
        self._check_thinking()

    def _check_tool_choice(self, names: set[str]) -> None:
        choice = self.tool_choice
        if choice in ("auto", "none"):
            return
        if choice == "any":
            if not names:
                raise ParamsError("tool_choice", "'any' forces a tool call but no tools are set")
            return
        if choice.startswith("tool:"):
            name = choice[len("tool:") :]
            if name not in names:
                raise ParamsError(
                    "tool_choice",
                    f"forces unknown tool {name!r}; known tools: {', '.join(sorted(names)) or '-'}",
                )
            return
        raise ParamsError(
            "tool_choice", f"expected 'auto', 'any', 'none' or 'tool:NAME', got {choice!r}"
        )

    def _check_thinking(self) -> None:
        if self.thinking is None:
            return
        if self.temperature is not None and self.temperature > 0:
            raise ParamsError(
                "temperature",
                f"extended thinking is incompatible with temperature {self.temperature}; "
                "leave temperature unset",
            )
        if self.tool_choice == "any" or self.tool_choice.startswith("tool:"):
            raise ParamsError(
                "tool_choice",
                f"extended thinking is incompatible with a forced tool choice "
                f"({self.tool_choice!r}); use 'auto' or 'none'",
            )
        if self.max_output_tokens <= self.thinking.budget_tokens:
            raise ParamsError(
                "max_output_tokens",
                f"must exceed thinking.budget_tokens ({self.thinking.budget_tokens}), "
                f"got {self.max_output_tokens}",
            )

    @property
    def model_chain(self) -> tuple[ModelChoice, ...]:
        """The primary model followed by the fallbacks, in order."""
        return (self.model, *self.fallbacks)

    @property
    def tool_definitions(self) -> tuple[dict[str, Any], ...]:
        return tuple(t.to_definition() for t in self.tools)

    def tool(self, name: str) -> ToolSpec | None:
        for t in self.tools:
            if t.name == name:
                return t
        return None

    def timeout_for(self, tool: ToolSpec) -> float:
        if tool.timeout is not None:
            return tool.timeout
        return self.tool_timeouts.get(tool.category, self.tool_timeouts["code"])
