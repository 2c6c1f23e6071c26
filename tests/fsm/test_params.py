"""HarnessParams rejects bad values and incompatible settings at construction."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import attrs
import pytest

from innerloop import (
    HarnessParams,
    ModelChoice,
    ParamsError,
    PromptCache,
    ServerTool,
    SpendBudget,
    Thinking,
    ToolSpec,
)
from innerloop.fsm import _params
from innerloop.recovery import DEFAULT_PRICES, Price, RecoveryPolicy
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
        (
            {"temperature": 3.0},
            "temperature",
            "temperature: must be None or a number between 0 and 2, got 3.0",
        ),
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
            "tool_timeouts['shell']: must be a finite number > 0, got 0",
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
    with pytest.raises(ParamsError, match=r"spend_budget.max_cost_usd: must be None or a finite"):
        SpendBudget(max_cost_usd=0)
    with pytest.raises(
        ParamsError, match=r"recovery.budget_compact_target: must be a number between"
    ):
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


NAN = float("nan")
INF = float("inf")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"context_budget": "big"}, "context_budget: must be None or an integer >= 1, got 'big'"),
        ({"context_budget": NAN}, "context_budget: must be None or an integer >= 1, got nan"),
        (
            {"temperature": "hot"},
            "temperature: must be None or a number between 0 and 2, got 'hot'",
        ),
        ({"temperature": NAN}, "temperature: must be None or a number between 0 and 2, got nan"),
        ({"top_p": 0}, "top_p: must be None or a number > 0 and <= 1, got 0"),
        ({"max_parallel_tools": "4"}, "max_parallel_tools: must be an integer >= 1, got '4'"),
        ({"max_turns": True}, "max_turns: must be an integer >= 1, got True"),
        ({"max_output_tokens": 10.0}, "max_output_tokens: must be an integer >= 1, got 10.0"),
        (
            {"tool_timeouts": {"shell": "x"}},
            "tool_timeouts['shell']: must be a finite number > 0, got 'x'",
        ),
        (
            {"tool_timeouts": {"shell": NAN}},
            "tool_timeouts['shell']: must be a finite number > 0, got nan",
        ),
        (
            {"tool_timeouts": {"code": INF}},
            "tool_timeouts['code']: must be a finite number > 0, got inf",
        ),
        (
            {"tool_timeouts": {"shel": 3}},
            "tool_timeouts['shel']: unknown tool category; did you mean 'shell'? known categories "
            "(the built-in ones and those of params.tools): code, file, network, shell",
        ),
        ({"tool_timeouts": {1: 3}}, "tool_timeouts key 1: must be a non-empty string, got 1"),
        (
            {"tool_timeouts": None},
            "tool_timeouts: must be a mapping of tool category to seconds, got None",
        ),
        ({"tools": None}, "tools: must be a list or tuple of ToolSpec, got None"),
        (
            {"tools": [_noop]},
            f"tools[0]: must be a ToolSpec (define tools with @tool), got {_noop!r}",
        ),
        ({"stop_sequences": ["END", 3]}, "stop_sequences[1]: must be a non-empty string, got 3"),
        ({"stop_sequences": [""]}, "stop_sequences[0]: must be a non-empty string, got ''"),
        ({"stop_sequences": None}, "stop_sequences: must be a list or tuple of strings, got None"),
        ({"system": 123}, "system: must be a string, got 123"),
        ({"tool_choice": None}, "tool_choice: must be a string, got None"),
        (
            {"prices": {"claude": 3.0}},
            "prices['claude']: must be a Price (US dollars per million tokens, e.g. "
            "Price(input=3.0, output=15.0)), got 3.0",
        ),
        ({"prices": None}, "prices: must be a mapping of model id (or prefix) to Price, got None"),
        ({"spend_budget": 1000}, "spend_budget: must be None or a SpendBudget, got 1000"),
        ({"thinking": 2048}, "thinking: must be None or a Thinking, got 2048"),
        ({"recovery": None}, "recovery: must be a RecoveryPolicy, got None"),
        ({"eager_tools": 1}, "eager_tools: must be True or False, got 1"),
        ({"strict_models": "yes"}, "strict_models: must be True or False, got 'yes'"),
        (
            {"fallbacks": [123]},
            "fallbacks[0]: must be a 'provider:model' string or a ModelChoice, got 123",
        ),
        (
            {"fallbacks": ["gpt-4o"]},
            "fallbacks[0]: expected 'provider:model' (e.g. 'anthropic:claude-...'), got 'gpt-4o'",
        ),
        ({"fallbacks": None}, "fallbacks: must be a list of 'provider:model' strings, got None"),
        ({"model": None}, "model: must be a 'provider:model' string or a ModelChoice, got None"),
    ],
)
def test_wrong_types_and_values_name_the_field(kwargs: dict[str, Any], message: str) -> None:
    """A wrong type, NaN, infinity or unknown key is a ParamsError naming the field, never a
    bare TypeError and never accepted."""
    kwargs.setdefault("model", M)
    with pytest.raises(ParamsError) as info:
        HarnessParams(**kwargs)
    assert str(info.value) == message
    assert message.startswith(info.value.field + ": ")


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda: SpendBudget(max_cost_usd=NAN),
            "spend_budget.max_cost_usd: must be None or a finite number > 0, got nan",
        ),
        (
            lambda: SpendBudget(max_cost_usd=INF),
            "spend_budget.max_cost_usd: must be None or a finite number > 0, got inf",
        ),
        (
            lambda: SpendBudget(max_tokens=1.5),  # type: ignore[arg-type]
            "spend_budget.max_tokens: must be None or an integer >= 1, got 1.5",
        ),
        (lambda: Thinking(True), "thinking.budget_tokens: must be an integer >= 1024, got True"),
        (
            lambda: RecoveryPolicy(backoff_initial="1"),  # type: ignore[arg-type]
            "recovery.backoff_initial: must be a finite number > 0, got '1'",
        ),
        (
            lambda: RecoveryPolicy(backoff_max=NAN),
            "recovery.backoff_max: must be a finite number > 0, got nan",
        ),
        (
            lambda: RecoveryPolicy(backoff_factor=0.5),
            "recovery.backoff_factor: must be a finite number >= 1, got 0.5",
        ),
        (
            lambda: RecoveryPolicy(backoff_max=0.5),
            "recovery.backoff_max: must be >= backoff_initial (1), got 0.5",
        ),
        (
            lambda: RecoveryPolicy(max_rate_limit_retries=True),
            "recovery.max_rate_limit_retries: must be an integer >= 0, got True",
        ),
        (
            lambda: RecoveryPolicy(budget_compact_target=NAN),
            "recovery.budget_compact_target: must be a number between 0 and 1 (exclusive), got nan",
        ),
        (
            lambda: RecoveryPolicy(continuation_message=""),
            "recovery.continuation_message: must be a non-empty string, got ''",
        ),
        (
            lambda: RecoveryPolicy(tool_failure_notice="Tool {tool} failed"),
            "recovery.tool_failure_notice: must be a template with only {name} and {count} "
            "placeholders, got 'Tool {tool} failed' (KeyError: 'tool'); "
            "double literal braces as {{ }}",
        ),
        (lambda: Price("3", 1), "price.input: must be a finite number >= 0, got '3'"),  # type: ignore[arg-type]
        (lambda: Price(1, NAN), "price.output: must be a finite number >= 0, got nan"),
        (lambda: Price(1, 2, -0.1), "price.cache_read: must be a finite number >= 0, got -0.1"),
        (lambda: ModelChoice(123, "x"), "model.provider: must be a non-empty string, got 123"),  # type: ignore[arg-type]
        (lambda: ModelChoice("openai", ""), "model.model: must be a non-empty string, got ''"),
    ],
)
def test_parts_validate_themselves(build: Any, message: str) -> None:
    """SpendBudget, Thinking, RecoveryPolicy, Price and ModelChoice refuse wrong types, NaN
    and infinity with a ParamsError naming the field."""
    with pytest.raises(ParamsError) as info:
        build()
    assert str(info.value) == message


def test_accepted_edge_values() -> None:
    """Ints where floats are expected, a tool's own category in tool_timeouts and a single
    stop sequence string are fine."""
    db = attrs.evolve(_tool("query"), category="database")
    p = HarnessParams(
        model=M,
        temperature=0,
        tools=[db],
        tool_timeouts={"database": 2, "shell": 1.5},
        stop_sequences="END",
        prices={"claude": Price(3, 15)},
        recovery=RecoveryPolicy(backoff_factor=1, tool_failure_notice="{name} broke {count}x"),
    )
    assert p.timeout_for(db) == 2
    assert p.stop_sequences == ("END",)
    assert dict(p.tool_timeouts)["shell"] == 1.5


def test_evolve_checks_the_field_it_changes_and_keeps_the_defaults() -> None:
    """attrs.evolve re-checks a changed field (the same error as at construction) and keeps
    the default tables as they are: the same read-only objects, not copies checked again."""
    p = HarnessParams(model="scripted:m-20250101")
    assert p.prices is DEFAULT_PRICES
    q = attrs.evolve(p, system="s")
    assert q.prices is p.prices
    assert q.tool_timeouts is p.tool_timeouts
    assert dict(q.tool_timeouts) == {"file": 5.0, "shell": 30.0, "network": 15.0, "code": 60.0}
    with pytest.raises(ParamsError, match="max_turns: must be an integer >= 1, got 0"):
        attrs.evolve(p, max_turns=0)
    with pytest.raises(ParamsError, match=r"prices\['x'\]: must be a Price"):
        attrs.evolve(p, prices={"x": 1.0})


# HarnessParams.evolve: the checks of what changed, the errors of construction

BAD_VALUE: dict[str, Any] = {
    "model": None,
    "system": 123,
    "tools": [_noop],
    "fallbacks": [123],
    "temperature": 3.0,
    "top_p": 0,
    "max_output_tokens": 10.0,
    "max_turns": 0,
    "context_budget": "big",
    "spend_budget": 1000,
    "tool_timeouts": {"shell": 0},
    "tool_choice": None,
    "thinking": 2048,
    "stop_sequences": [""],
    "recovery": None,
    "prices": {"claude": 3.0},
    "max_parallel_tools": "4",
    "eager_tools": 1,
    "strict_models": "yes",
    "cache_tools": 1,
    "cache_last_user_turn": "no",
    "prompt_cache": None,
    "call_deadline": 0,
    "output_type": 3,
    "output_mode": "json",
    "max_output_repairs": -1,
    "max_json_depth": 0,
    "server_tools": ["web_search"],
    "prepare_tools": 3,
    "tool_sources": [3],
}
"""One bad value for each field HarnessParams takes."""

GOOD_VALUE: dict[str, Any] = {
    "model": "openai:gpt-4o-2024-08-06",
    "system": "Be brief.",
    "tools": [_tool("a"), _tool("b")],
    "fallbacks": ["openai:gpt-4o-2024-08-06"],
    "temperature": 0.5,
    "top_p": 0.9,
    "max_output_tokens": 1000,
    "max_turns": 3,
    "context_budget": 50_000,
    "spend_budget": SpendBudget(max_tokens=10_000),
    "tool_timeouts": {"shell": 2},
    "tool_choice": "none",
    "thinking": Thinking(2048),
    "stop_sequences": "END",
    "recovery": RecoveryPolicy(transient_retries=2),
    "prices": {"claude": Price(3, 15)},
    "max_parallel_tools": 2,
    "eager_tools": True,
    "strict_models": True,
    "cache_tools": True,
    "cache_last_user_turn": True,
    "prompt_cache": PromptCache(last_messages=1),
    "call_deadline": None,
    "output_type": {"type": "object", "properties": {"x": {"type": "integer"}}},
    "output_mode": "auto",
    "max_output_repairs": 0,
    "max_json_depth": 10,
    "server_tools": [ServerTool("web_search")],
    "prepare_tools": lambda state, tools: tools,
    "tool_sources": (),
}
"""One good value for each field HarnessParams takes (a list where the field is a tuple,
a string where it is a tuple of strings: the converters run)."""

INIT_FIELDS = {a.name for a in attrs.fields(HarnessParams) if a.init}
BASE = HarnessParams(model=M, system="s", tools=[_tool("a")], max_turns=5)


def _given(params: HarnessParams[Any]) -> dict[str, Any]:
    return {name: getattr(params, name) for name in INIT_FIELDS}


def _error(build: Any) -> BaseException:
    with pytest.raises((ParamsError, TypeError)) as info:
        build()
    return info.value


def _same_error(built: BaseException, evolved: BaseException) -> None:
    assert type(evolved) is type(built)
    assert str(evolved) == str(built)
    if isinstance(built, ParamsError):
        assert isinstance(evolved, ParamsError)
        assert evolved.field == built.field


def test_the_tables_cover_every_field() -> None:
    """BAD_VALUE and GOOD_VALUE name every field HarnessParams takes: a field added later
    is tested through evolve too."""
    assert set(BAD_VALUE) == INIT_FIELDS
    assert set(GOOD_VALUE) == INIT_FIELDS


@pytest.mark.parametrize("field", sorted(BAD_VALUE))
def test_evolve_refuses_a_bad_field_as_construction_does(field: str) -> None:
    """A bad value given to evolve raises what the constructor raises for it, word for
    word."""
    change = {field: BAD_VALUE[field]}
    built = _error(lambda: HarnessParams(**{**_given(BASE), **change}))
    assert isinstance(built, ParamsError)
    _same_error(built, _error(lambda: BASE.evolve(**change)))


@pytest.mark.parametrize("field", sorted(GOOD_VALUE))
def test_evolve_makes_what_attrs_evolve_makes(field: str) -> None:
    """A good change gives params equal to attrs.evolve's, converted alike."""
    base = BASE if field != "model" else HarnessParams(model=M, thinking=None)
    change = {field: GOOD_VALUE[field]}
    if field == "thinking":
        base = attrs.evolve(base, max_output_tokens=8192)
    if field == "cache_last_user_turn" or field == "cache_tools":
        base = attrs.evolve(base, prompt_cache=PromptCache())
    expected = attrs.evolve(base, **change)
    got = base.evolve(**change)
    assert got == expected
    assert type(got) is HarnessParams
    assert attrs.asdict(got, recurse=False) == attrs.asdict(expected, recurse=False)
    assert (got.output_spec is None) == (expected.output_spec is None)


def test_evolve_with_no_change_is_the_same_params() -> None:
    """Nothing to change, nothing to check: the params themselves come back."""
    assert BASE.evolve() is BASE
    again = BASE.evolve(system=BASE.system)
    assert again == BASE
    assert again is not BASE


def test_evolve_keeps_the_default_tables() -> None:
    """A change elsewhere keeps the default price table and timeouts as they are."""
    p = HarnessParams(model="scripted:m-20250101")
    q = p.evolve(system="s")
    assert q.prices is DEFAULT_PRICES
    assert q.tool_timeouts is p.tool_timeouts


def test_evolve_of_an_unknown_field_is_inits_type_error() -> None:
    """A name HarnessParams does not take is the TypeError attrs.evolve raises."""
    _same_error(
        _error(lambda: attrs.evolve(BASE, max_turn=3)),  # type: ignore[call-arg]
        _error(lambda: BASE.evolve(max_turn=3)),
    )
    _same_error(
        _error(lambda: attrs.evolve(BASE, output_spec=None)),  # type: ignore[call-arg]
        _error(lambda: BASE.evolve(output_spec=None)),
    )


def test_evolve_reports_the_first_bad_field_in_field_order() -> None:
    """Several bad changes: the error is the one construction reports first."""
    change: dict[str, Any] = {"max_turns": 0, "system": 1, "fallbacks": [3]}
    built = _error(lambda: attrs.evolve(BASE, **change))
    _same_error(built, _error(lambda: BASE.evolve(**change)))
    assert str(built).startswith("fallbacks[0]:")  # converters run before validators


def test_evolve_compiles_a_new_output_type() -> None:
    """A new output_type gets its own compiled spec; other changes keep the old one."""
    typed = BASE.evolve(output_type=GOOD_VALUE["output_type"])
    assert typed.output_spec is not None
    assert typed.evolve(max_turns=9).output_spec is typed.output_spec
    assert typed.evolve(output_type=None).output_spec is None


_DB = attrs.evolve(_tool("query"), category="database")
_CLAUDE_3 = "anthropic:claude-3-haiku-20240307"
_GPT = "openai:gpt-4o-2024-08-06"
_SCHEMA = {"type": "object"}

ACROSS: list[tuple[dict[str, Any], dict[str, Any]]] = [
    ({"thinking": Thinking(4096), "max_output_tokens": 8192}, {"max_output_tokens": 4096}),
    ({"max_output_tokens": 4096}, {"thinking": Thinking(4096)}),
    ({"thinking": Thinking(2048)}, {"temperature": 0.7}),
    ({"temperature": 0.7}, {"thinking": Thinking(2048)}),
    ({"thinking": Thinking(2048), "tools": [_tool("a")]}, {"tool_choice": "tool:a"}),
    ({"tools": [_tool("a")], "tool_choice": "tool:a"}, {"thinking": Thinking(2048)}),
    ({"thinking": Thinking(2048)}, {"model": _GPT}),
    ({"model": _GPT}, {"thinking": Thinking(2048)}),
    ({"context_budget": 5000}, {"max_output_tokens": 8192}),
    ({"max_output_tokens": 2000}, {"context_budget": 1000}),
    ({"fallbacks": [_GPT]}, {"model": _GPT}),
    ({"model": _GPT}, {"fallbacks": [_GPT]}),
    ({"strict_models": True}, {"model": "anthropic:claude-sonnet-4-5"}),
    ({"strict_models": True}, {"fallbacks": ["openai:gpt-4o"]}),
    ({"fallbacks": ["openai:gpt-4o"]}, {"strict_models": True}),
    ({"tools": [_DB], "tool_timeouts": {"database": 2}}, {"tools": []}),
    ({}, {"tool_timeouts": {"database": 2}}),
    ({"tools": [_tool("a")], "tool_choice": "tool:a"}, {"tools": [_tool("b")]}),
    ({"tools": [_tool("a")], "tool_choice": "any"}, {"tools": []}),
    ({"tools": [_tool("a")]}, {"tool_choice": "tool:b"}),
    ({"output_type": _SCHEMA}, {"tool_choice": "any", "tools": [_tool("a")]}),
    ({"tools": [_tool("a")], "tool_choice": "any"}, {"output_type": _SCHEMA}),
    ({"output_type": _SCHEMA, "output_mode": "tool"}, {"tools": [_tool("final_result")]}),
    ({"tools": [_tool("final_result")]}, {"output_type": _SCHEMA, "output_mode": "tool"}),
    ({"tools": [_tool("final_result")], "output_type": _SCHEMA}, {"output_mode": "tool"}),
    ({"output_type": _SCHEMA, "output_mode": "tool"}, {"tool_choice": "none"}),
    ({"output_type": _SCHEMA, "output_mode": "native"}, {"model": _CLAUDE_3}),
    ({"output_type": _SCHEMA, "output_mode": "native"}, {"fallbacks": [_CLAUDE_3]}),
    ({"model": _CLAUDE_3, "output_type": _SCHEMA}, {"output_mode": "native"}),
    ({}, {"output_mode": "native"}),
    ({"output_type": _SCHEMA, "output_mode": "native"}, {"output_type": None}),
    ({"prompt_cache": PromptCache(system=True, last_messages=3)}, {"cache_tools": True}),
    ({"cache_tools": True}, {"prompt_cache": PromptCache(system=True, last_messages=3)}),
    ({"server_tools": [ServerTool("web_search")]}, {"tools": [_tool("web_search")]}),
    ({"tools": [_tool("web_search")]}, {"server_tools": [ServerTool("web_search")]}),
]
"""Checks across fields: params that pass, and a change that breaks the combination (each
side of each check changed in turn)."""


@pytest.mark.parametrize(("base", "change"), ACROSS)
def test_evolve_runs_the_checks_across_the_fields_it_changes(
    base: dict[str, Any], change: dict[str, Any]
) -> None:
    """A change that breaks a check across fields raises what construction raises."""
    params = HarnessParams(**{"model": M, **base})
    built = _error(lambda: HarnessParams(**{"model": M, **base, **change}))
    assert isinstance(built, ParamsError)
    _same_error(built, _error(lambda: params.evolve(**change)))
    _same_error(built, _error(lambda: attrs.evolve(params, **change)))


class _Reads:
    """Stands for params in a check across fields, noting each field the check reads (its
    helpers' and properties' reads included)."""

    def __init__(self, params: HarnessParams[Any]) -> None:
        self.params, self.read = params, set[str]()

    def __getattr__(self, name: str) -> Any:
        if name in {a.name for a in attrs.fields(HarnessParams)}:
            self.read.add("output_type" if name == "output_spec" else name)
            return getattr(self.params, name)
        found = inspect.getattr_static(HarnessParams, name)
        if isinstance(found, property):
            return found.fget(self)  # type: ignore[misc]
        return found.__get__(self)


RICH = [
    HarnessParams(
        model=M,
        fallbacks=["anthropic:claude-opus-4-1-20250805"],
        thinking=Thinking(2048),
        max_output_tokens=8192,
        tools=[_DB],
        tool_timeouts={"database": 2},
        output_type=_SCHEMA,
        output_mode="tool",
        strict_models=True,
        context_budget=100_000,
        cache_tools=True,
        server_tools=[ServerTool("web_search")],
    ),
    HarnessParams(model=_GPT, fallbacks=[M], tools=[_tool("a")], tool_choice="tool:a"),
    HarnessParams(model=M, tools=[_tool("a")], tool_choice="any"),
]
"""Params on which each check across fields runs to its end."""


@pytest.mark.parametrize("params", RICH)
def test_each_check_across_fields_reads_only_what_it_declares(
    params: HarnessParams[Any],
) -> None:
    """An evolve skips a check across fields when none of the fields it declares changed:
    each check reads no other field."""
    for check, reads in _params._READS:
        spy = _Reads(params)
        check(spy)  # type: ignore[arg-type]
        assert spy.read <= reads, (check.__name__, spy.read - reads)


def test_every_check_across_fields_is_declared() -> None:
    """Each ``_check_*`` method construction runs is in the table evolve reads."""
    declared = {check.__name__ for check, _ in _params._READS}
    helpers = {"_check_family", "_check_output_tool"}  # called by _check_thinking, _check_output
    methods = {n for n in vars(HarnessParams) if n.startswith("_check_")} - helpers
    assert declared == methods
