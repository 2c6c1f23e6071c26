"""HarnessParams: everything set once before the loop, validated at construction."""

from __future__ import annotations

import collections
import difflib
import functools
import operator
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Generic, Literal, Protocol

import attrs

from innerloop._errors import ParamsError
from innerloop._json import MAX_JSON_DEPTH, MAX_JSON_DEPTH_LIMIT
from innerloop._validators import (
    Check,
    boolean,
    check_changed,
    check_fields,
    checked,
    instance,
    integer,
    mapping_of,
    number,
    optional,
    string,
    tuple_of,
)
from innerloop.fsm._output import OutputSpec, OutputT, output_spec
from innerloop.providers._cache import PromptCache
from innerloop.providers._normalize import (
    OUTPUT_MODES,
    OUTPUT_TOOL,
    native_output,
    output_tool_used,
)
from innerloop.providers._reasoning import EFFORTS, family_of
from innerloop.providers._servertools import ServerTool
from innerloop.recovery._policy import RecoveryPolicy
from innerloop.recovery._pricing import DEFAULT_PRICES, Price
from innerloop.tools._spec import DEFAULT_TIMEOUTS, ToolSource, ToolSpec


class PrepareTools(Protocol):
    """``prepare_tools(state, tools)``: the tools offered this turn, chosen from ``tools``
    (specs or names, in the order to offer them); ``state`` is the run's ``HarnessState``.
    Not data: a run whose params cross JSON (a durable engine) cannot carry one."""

    def __call__(self, state: Any, tools: tuple[ToolSpec, ...], /) -> Sequence[ToolSpec | str]: ...


__all__ = ["HarnessParams", "ModelChoice", "PrepareTools", "SpendBudget", "Thinking"]

_DATED = re.compile(r"(\d{8}|\d{4}-\d{2}-\d{2})$")


@attrs.frozen
class ModelChoice:
    """A provider and a model id, e.g. ``ModelChoice("anthropic", "claude-sonnet-4-5-20250929")``.

    ``ModelChoice.parse("openai:gpt-4o-mini-2024-07-18")`` reads the ``provider:model`` form.
    """

    provider: str = attrs.field(validator=string(non_empty=True, prefix="model."))
    model: str = attrs.field(validator=string(non_empty=True, prefix="model."))

    @classmethod
    def parse(cls, value: str | ModelChoice, field: str = "model") -> ModelChoice:
        """``value`` as a ModelChoice; a ParamsError for ``field`` when it is not one."""
        if isinstance(value, ModelChoice):
            return value
        if not isinstance(value, str):
            raise ParamsError(
                field, f"must be a 'provider:model' string or a ModelChoice, got {value!r}", value
            )
        return _parse_choice(value, field)

    @property
    def dated(self) -> bool:
        return bool(_DATED.search(self.model))

    def __str__(self) -> str:
        return f"{self.provider}:{self.model}"


@functools.lru_cache(maxsize=256)
def _parse_choice(value: str, field: str) -> ModelChoice:
    """``'provider:model'`` as a ModelChoice (frozen: one per string, parsed once)."""
    provider, sep, model = value.partition(":")
    if not sep or not provider or not model:
        raise ParamsError(
            field, f"expected 'provider:model' (e.g. 'anthropic:claude-...'), got {value!r}"
        )
    return ModelChoice(provider, model)


def _choice(value: str | ModelChoice) -> ModelChoice:
    return _parse_choice(value, "model") if type(value) is str else ModelChoice.parse(value)


def _choices(values: Iterable[str | ModelChoice]) -> tuple[ModelChoice, ...]:
    if values == ():
        return ()
    if isinstance(values, str | ModelChoice):
        values = (values,)
    if not isinstance(values, Iterable):
        raise ParamsError(
            "fallbacks", f"must be a list of 'provider:model' strings, got {values!r}", values
        )
    return tuple(ModelChoice.parse(v, f"fallbacks[{i}]") for i, v in enumerate(values))


_T = "thinking."


_BUDGET = integer(ge=1024, prefix=_T)


def _budget(instance: object, attribute: attrs.Attribute[Any], value: int | None) -> None:
    if value is not None:
        _BUDGET(instance, attribute, value)


def _effort(instance: object, attribute: attrs.Attribute[Any], value: str | None) -> None:
    if value is not None and value not in EFFORTS:
        raise ParamsError(
            _T + attribute.name,
            f"must be one of {', '.join(EFFORTS)} or None, got {value!r}",
            value,
        )


def _summary(instance: object, attribute: attrs.Attribute[Any], value: str | None) -> None:
    if value is not None and value not in ("auto", "concise", "detailed"):
        raise ParamsError(
            _T + attribute.name, f"must be 'auto', 'concise', 'detailed' or None, got {value!r}"
        )


@attrs.frozen
class Thinking:
    """Reasoning for every model in the chain, each taking what its family takes:

    - ``budget_tokens``: Anthropic's extended thinking budget (at least 1024);
    - ``adaptive``: Anthropic's adaptive thinking, on the models that take it (Claude 4.6);
    - ``effort``: OpenAI's reasoning effort (Chat Completions and Responses), and
      Anthropic's output effort on the models that take it;
    - ``summary``: the reasoning summaries the Responses API streams (None: none).

    ``Thinking(2048)`` is a budget. The params check each setting against each model's
    family, and name the model and the setting when one does not fit (the manual's
    "Models, providers and cloud routes" page lists which family takes which)."""

    budget_tokens: int | None = attrs.field(default=None, validator=_budget)
    effort: str | None = attrs.field(default=None, validator=_effort)
    adaptive: bool = attrs.field(default=False, validator=boolean(prefix=_T))
    summary: str | None = attrs.field(default="auto", validator=_summary)

    def __attrs_post_init__(self) -> None:
        if self.budget_tokens is None and self.effort is None and not self.adaptive:
            raise ParamsError(
                "thinking",
                "sets no reasoning: give budget_tokens (Anthropic), effort (OpenAI) or "
                "adaptive=True, or leave thinking=None",
            )
        if self.adaptive and self.budget_tokens is not None:
            raise ParamsError(
                "thinking.adaptive",
                "adaptive thinking takes no budget: drop budget_tokens or adaptive",
            )


_SPEND = "spend_budget."


@attrs.frozen
class SpendBudget:
    """What one run may spend: total tokens and/or US dollars. Reaching either ends the run
    with ``budget_exceeded``. This is not the context budget (which triggers compaction)."""

    max_tokens: int | None = attrs.field(
        default=None, validator=optional(integer(ge=1, prefix=_SPEND))
    )
    max_cost_usd: float | None = attrs.field(
        default=None, validator=optional(number(gt=0, prefix=_SPEND))
    )


def _as_tuple(value: Any) -> Any:
    """Lists (any iterable but a string or mapping) become tuples; anything else is left for
    the field's validator to name."""
    if type(value) is tuple:
        return value
    if type(value) is list:
        return tuple(value)
    if isinstance(value, Iterable) and not isinstance(value, str | bytes | Mapping):
        return tuple(value)
    return value


def _str_tuple(value: Any) -> Any:
    if value == ():
        return ()
    return (value,) if isinstance(value, str) else _as_tuple(value)


def _readonly(value: Any) -> Any:
    if value is DEFAULT_PRICES:
        return value
    return MappingProxyType(dict(value)) if isinstance(value, Mapping) else value


def _timeouts(value: Any) -> Any:
    if value is _default_timeouts() or not isinstance(value, Mapping):
        return value
    if not value:
        return _default_timeouts()
    merged = dict(DEFAULT_TIMEOUTS)
    merged.update(value)
    return MappingProxyType(merged)


_PRICES = mapping_of(
    instance(Price, hint=" (US dollars per million tokens, e.g. Price(input=3.0, output=15.0))"),
    "model id (or prefix) to Price",
)
_TIMEOUTS = mapping_of(number(gt=0), "tool category to seconds")


@functools.cache
def _default_prices() -> Mapping[str, Price]:
    """The default price table, checked the first time a process uses it."""
    _PRICES(None, attrs.fields(HarnessParams).prices, DEFAULT_PRICES)
    return DEFAULT_PRICES


@functools.cache
def _default_timeouts() -> Mapping[str, float]:
    """The default tool timeouts, read-only, checked the first time a process uses them."""
    timeouts = MappingProxyType(dict(DEFAULT_TIMEOUTS))
    _TIMEOUTS(None, attrs.fields(HarnessParams).tool_timeouts, timeouts)
    return timeouts


def _unique(what: str) -> Callable[[object, attrs.Attribute[Any], Any], None]:
    """A validator: no two items of the field share a ``name`` (``what`` names them)."""

    def check(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
        if len(value) < 2:  # nothing to share a name with
            return
        names: set[str] = set()
        for item in value:
            if item.name in names:
                raise ParamsError(attribute.name, f"duplicate {what} {item.name!r}", item.name)
            names.add(item.name)

    return check


_unique_tools = _unique("tool name")


_TOOLS = tuple_of(instance(ToolSpec, hint=" (define tools with @tool)"), "ToolSpec")
_SERVER_TOOLS = tuple_of(
    instance(ServerTool, hint=' (e.g. ServerTool("web_search"))'), "ServerTool"
)
_SOURCES = tuple_of(
    instance(ToolSource, hint=" (an object with async tools(), such as an MCPServer)"),
    "tool sources",
)
_CALLABLE = Check("a function (state, tools) -> the tools to offer", callable)
_unique_server_tools = _unique("server tool")


_FLAG = boolean()


def _output_mode(_: Any, __: Any, value: Any) -> None:
    if value not in OUTPUT_MODES:
        raise ParamsError(
            "output_mode", f"expected one of {', '.join(map(repr, OUTPUT_MODES))}, got {value!r}"
        )


@attrs.frozen(kw_only=True)
class HarnessParams(Generic[OutputT]):
    """Set once before the loop; immutable for the whole run.

    Every bad value or incompatible combination raises :class:`ParamsError` naming the
    field and the reason, here, at construction.
    """

    model: ModelChoice = attrs.field(converter=_choice)
    system: str = attrs.field(default="", metadata=checked(string()))
    tools: tuple[ToolSpec, ...] = attrs.field(
        default=(), converter=_as_tuple, metadata=checked(_TOOLS, _unique_tools)
    )
    fallbacks: tuple[ModelChoice, ...] = attrs.field(default=(), converter=_choices)
    temperature: float | None = attrs.field(
        default=None, metadata=checked(optional(number(ge=0, le=2)))
    )
    top_p: float | None = attrs.field(default=None, metadata=checked(optional(number(gt=0, le=1))))
    max_output_tokens: int = attrs.field(default=4096, metadata=checked(integer(ge=1)))
    max_turns: int = attrs.field(default=20, metadata=checked(integer(ge=1)))
    context_budget: int | None = attrs.field(
        default=None, metadata=checked(optional(integer(ge=1)))
    )
    """Tokens one request may hold; over it, history is compacted before the call."""
    spend_budget: SpendBudget | None = attrs.field(
        default=None, metadata=checked(optional(instance(SpendBudget)))
    )
    """What the whole run may spend; reaching it ends the run."""
    tool_timeouts: Mapping[str, float] = attrs.field(
        factory=_default_timeouts, converter=_timeouts, metadata=checked(_TIMEOUTS)
    )
    """Seconds per tool category (``file``, ``shell``, ``network``, ``code`` and the
    categories of ``tools``); a tool's own ``timeout`` wins."""
    tool_choice: str = attrs.field(default="auto", metadata=checked(string()))
    """``auto``, ``any``, ``none``, or ``tool:NAME`` to force one tool."""
    thinking: Thinking | None = attrs.field(
        default=None, metadata=checked(optional(instance(Thinking)))
    )
    stop_sequences: tuple[str, ...] = attrs.field(
        default=(),
        converter=_str_tuple,
        metadata=checked(tuple_of(string(non_empty=True), "strings")),
    )
    recovery: RecoveryPolicy = attrs.field(
        default=RecoveryPolicy(), metadata=checked(instance(RecoveryPolicy))
    )
    prices: Mapping[str, Price] = attrs.field(
        factory=_default_prices, converter=_readonly, metadata=checked(_PRICES)
    )
    max_parallel_tools: int = attrs.field(default=4, metadata=checked(integer(ge=1)))
    eager_tools: bool = attrs.field(default=False, metadata=checked(_FLAG))
    strict_models: bool = attrs.field(default=False, metadata=checked(_FLAG))
    """Refuse undated model aliases (pin a dated id so behaviour cannot change silently)."""
    cache_tools: bool = attrs.field(default=False, metadata=checked(_FLAG))
    """Shorthand for ``prompt_cache.tools=True``."""
    cache_last_user_turn: bool = attrs.field(default=False, metadata=checked(_FLAG))
    """Shorthand for a breakpoint on the last message (``prompt_cache.last_messages=1``)."""
    prompt_cache: PromptCache = attrs.field(
        default=PromptCache(), metadata=checked(instance(PromptCache))
    )
    """Prompt caching: Anthropic's breakpoints (system, tools, the last N messages) and
    their lifetimes, OpenAI's ``prompt_cache_key`` and ``prompt_cache_retention``."""
    call_deadline: float | None = attrs.field(
        default=600.0, metadata=checked(optional(number(gt=0)))
    )
    """Seconds one model call may take from the request to the end of its stream (a server
    trickling bytes within each read timeout is stopped here); past it, the call fails as
    a transient timeout and is retried once. None: no overall limit."""
    output_type: type[OutputT] | Mapping[str, Any] | None = attrs.field(default=None)
    """The type of the final answer: a pydantic model, a dataclass, a TypedDict or a JSON
    schema dict (an object). Each model is asked for it in its provider's native
    structured-output form or through the final-result tool (see ``output_mode``); the
    answer is validated and ``state.output`` holds the typed value. None: the
    answer is free text. A type checker reads the type off it: ``output_type=Weather``
    makes a ``HarnessParams[Weather]``, whose harness's ``state.output`` is
    ``Weather | None``."""
    output_mode: Literal["auto", "native", "tool", "json"] = attrs.field(
        default="auto", metadata=checked(_output_mode)
    )
    """How the answer of ``output_type`` is asked for: ``native`` structured output,
    the final-result ``tool`` (``final_result``, its input the answer), ``json``
    (``json_object`` with the schema in the system prompt, for OpenAI-compatible servers
    that refuse ``json_schema``; native for the other dialects), or ``auto``: native
    where the model has it, else the tool (decided per model of the chain). An
    ``OpenAIProvider`` whose server refuses ``json_schema`` falls back to ``json`` by
    itself, with an ``output_format_fallback`` alert."""
    max_output_repairs: int = attrs.field(default=2, metadata=checked(integer(ge=0)))
    """How many times an answer that does not match ``output_type`` is sent back to the
    model with the validation errors (the ``repair`` state) before the run fails."""
    max_json_depth: int = attrs.field(
        default=MAX_JSON_DEPTH, metadata=checked(integer(ge=1, le=MAX_JSON_DEPTH_LIMIT))
    )
    """The deepest nesting of arrays and objects the run reads from outside: the typed
    answer, tool-call arguments (a ``final_result`` call's included) and resume answers.
    Deeper is an ordinary error in each place: the answer is repaired, the call gets an
    ``is_error`` result without running, the resume answer is a ``ResumeError``. 1 to
    200 (pydantic's JSON parser, which validates answers and arguments, reads no deeper);
    the events around a model's answer may nest 32 levels more."""
    server_tools: tuple[ServerTool, ...] = attrs.field(
        default=(),
        converter=_as_tuple,
        metadata=checked(_SERVER_TOOLS, _unique_server_tools),
    )
    """Tools the provider runs itself (``ServerTool("web_search")``, ...): offered to each
    model of the chain whose API runs them; the harness refuses one the primary model's
    provider cannot run. Their calls and results stay in the history (``ServerToolBlock``)
    and are shown as ``server_tool`` events."""
    prepare_tools: PrepareTools | None = attrs.field(
        default=None, metadata=checked(optional(_CALLABLE))
    )
    """Chooses the tools offered on each turn: called before each model call with the
    run's state and the declared tools (``tools``, then those of ``tool_sources``), it
    returns some of them (specs or names), in the order to offer them. A call to a
    declared tool that is not offered is answered with an error result. None: all."""
    tool_sources: tuple[ToolSource, ...] = attrs.field(
        default=(), converter=_as_tuple, metadata=checked(_SOURCES)
    )
    """Sources of tools read again before each turn (an ``MCPServer``: a server that
    changes its list, ``notifications/tools/list_changed``, is seen at the next turn)."""
    output_spec: OutputSpec | None = attrs.field(init=False, eq=False, repr=False)
    """``output_type`` compiled: the schema sent and the answer's validator."""

    @output_spec.default
    def _output_spec(self) -> OutputSpec | None:
        return None if self.output_type is None else output_spec(self.output_type)

    def __attrs_post_init__(self) -> None:
        """The fields' own checks (a field left at its default is not checked again), then
        the checks that read more than one field, each a small method called when a field
        it reads is off its default (the defaults agree with each other). Each method is
        also whole on its own (it returns at once when its fields are at their defaults),
        as :meth:`evolve` calls it."""
        check_fields(self)
        if self.output_type is not None or self.output_mode != "auto":
            self._check_output()
        if self.strict_models:
            self._check_strict_models()
        if self.fallbacks:
            self._check_repeated_models()
        if self.context_budget is not None:
            self._check_context_budget()
        if self.tool_timeouts is not _default_timeouts():
            self._check_timeout_categories()
        if self.tool_choice not in ("auto", "none"):
            self._check_tool_choice()
        if self.thinking is not None:
            self._check_thinking()
        if self.cache_tools or self.cache_last_user_turn:
            self._check_prompt_cache()

        if self.server_tools:
            self._check_server_tool_names()

    def evolve(self, **changes: Any) -> HarnessParams[OutputT]:
        """A copy with ``changes``, as ``attrs.evolve(params, **changes)`` makes it (the same
        conversions, the same errors for a bad change), checking only what the changes
        touch: each changed field's own checks and each check across fields that reads a
        changed field; the fields kept were checked when these params were built.
        ``params.evolve()`` with no changes is ``params``."""
        if not changes:
            return self
        if type(self) is not HarnessParams or not changes.keys() <= _INIT_ORDER.keys():
            return attrs.evolve(self, **changes)  # a subclass, or __init__'s own TypeError
        names = sorted(changes, key=_INIT_ORDER.__getitem__) if len(changes) > 1 else [*changes]
        values = [*_read_all(self)]
        for name in names:  # converted in field order, as __init__ does
            convert = _CONVERTERS.get(name)
            values[_INIT_ORDER[name]] = changes[name] if convert is None else convert(changes[name])
        new: HarnessParams[Any] = object.__new__(HarnessParams)
        set_field = _set_field.__get__(new)  # a frozen class refuses setattr: set its slots
        collections.deque(map(set_field, _NAMES, values), maxlen=0)
        if "output_type" in changes:
            set_field("output_spec", new._output_spec())
        check_changed(new, names)
        for check in _ACROSS[names[0]] if len(names) == 1 else _across(names):
            check(new)
        return new

    def _check_prompt_cache(self) -> None:
        """The shorthand flags folded into ``prompt_cache`` must still make a request
        Anthropic takes (at most four breakpoints)."""
        if self.cache_tools or self.cache_last_user_turn:
            _ = self.effective_prompt_cache  # making it is the check

    @property
    def effective_prompt_cache(self) -> PromptCache:
        """``prompt_cache`` with ``cache_tools`` and ``cache_last_user_turn`` folded in."""
        cache = self.prompt_cache
        if not (self.cache_tools or self.cache_last_user_turn):
            return cache
        return attrs.evolve(
            cache,
            tools=cache.tools or self.cache_tools,
            last_messages=max(cache.last_messages, int(self.cache_last_user_turn)),
        )

    def _check_server_tool_names(self) -> None:
        for server in self.server_tools:
            if self.tool(server.name) is not None:
                raise ParamsError(
                    "tools",
                    f"the tool name {server.name!r} is taken by the server tool of that name; "
                    "rename the tool",
                    server.name,
                )

    def _check_strict_models(self) -> None:
        if not self.strict_models:
            return
        for i, choice in enumerate(self.model_chain):
            if choice.provider != "scripted" and not choice.dated:
                raise ParamsError(
                    "model" if i == 0 else f"fallbacks[{i - 1}]",
                    f"strict_models refuses the undated alias {choice.model!r}; "
                    "pin a dated model id (e.g. 'claude-sonnet-4-5-20250929')",
                    choice,
                )

    def _check_repeated_models(self) -> None:
        seen: set[ModelChoice] = set()
        for i, choice in enumerate(self.model_chain):
            if choice in seen:
                what = "repeats the primary model" if choice == self.model else "repeats a model"
                raise ParamsError(f"fallbacks[{i - 1}]", f"{what} ({choice})", choice)
            seen.add(choice)

    def _check_context_budget(self) -> None:
        if self.context_budget is not None and self.context_budget <= self.max_output_tokens:
            raise ParamsError(
                "context_budget",
                f"must exceed max_output_tokens ({self.max_output_tokens}), "
                f"got {self.context_budget}",
            )

    def _check_timeout_categories(self) -> None:
        known = {*DEFAULT_TIMEOUTS, *(t.category for t in self.tools)}
        for category in self.tool_timeouts:
            if category not in known:
                close = difflib.get_close_matches(category, known, n=1)
                hint = f"did you mean {close[0]!r}? " if close else ""
                raise ParamsError(
                    f"tool_timeouts[{category!r}]",
                    f"unknown tool category; {hint}known categories (the built-in ones and "
                    f"those of params.tools): {', '.join(sorted(known))}",
                    category,
                )

    def _check_tool_choice(self) -> None:
        choice = self.tool_choice
        if choice in ("auto", "none"):
            return
        names = {t.name for t in self.tools}
        if choice == "any":
            if not names:
                raise ParamsError("tool_choice", "'any' forces a tool call but no tools are set")
            return
        if choice.startswith("tool:"):
            name = choice[len("tool:") :]
            if name == OUTPUT_TOOL and self.output_type is not None:
                return  # the final-result tool's call is the answer: _check_output's
            if name not in names:
                raise ParamsError(
                    "tool_choice",
                    f"forces unknown tool {name!r}; known tools: {', '.join(sorted(names)) or '-'}",
                )
            return
        raise ParamsError(
            "tool_choice", f"expected 'auto', 'any', 'none' or 'tool:NAME', got {choice!r}"
        )

    def _check_output(self) -> None:
        if self.output_type is None:
            if self.output_mode != "auto":
                raise ParamsError(
                    "output_mode",
                    f"{self.output_mode!r} asks for a typed answer but output_type is None; "
                    "set output_type or leave output_mode='auto'",
                )
            return
        forced = self.tool_choice == "any" or self.tool_choice.startswith("tool:")
        if forced and not self._forces_final_result():
            raise ParamsError(
                "tool_choice",
                f"{self.tool_choice!r} forces a tool call on every turn, so the model can never "
                "give the typed final answer output_type asks for; use 'auto', or "
                f"'tool:{OUTPUT_TOOL}' with output_mode='tool' (that call is the answer)",
            )
        for i, choice in enumerate(self.model_chain):
            if self.output_mode in ("native", "json") and not native_output(choice.model):
                raise ParamsError(
                    "model" if i == 0 else f"fallbacks[{i - 1}]",
                    f"{choice.model} has no native structured output, which "
                    f"output_mode={self.output_mode!r} needs: use output_mode='auto' (the "
                    "final-result tool for this model) or pick Claude Sonnet 4.5, Opus 4.1, "
                    "Haiku 4.5 or later",
                    choice,
                )
            self._check_output_tool(choice)

    def _forces_final_result(self) -> bool:
        """Whether ``tool_choice`` forces the final-result tool and every model of the
        chain is asked for the answer through it: then the forced call is the answer."""
        return self.tool_choice == f"tool:{OUTPUT_TOOL}" and all(
            self.output_tool(c.model) for c in self.model_chain
        )

    def _check_output_tool(self, choice: ModelChoice) -> None:
        """The final-result tool for ``choice``: its name free, tool calls allowed."""
        if not self.output_tool(choice.model):
            return
        if self.tool(OUTPUT_TOOL) is not None:
            raise ParamsError(
                "tools",
                f"the tool name {OUTPUT_TOOL!r} is taken by the final-result tool that "
                f"output_type asks {choice.model} for; rename the tool",
                OUTPUT_TOOL,
            )
        if self.tool_choice == "none":
            raise ParamsError(
                "tool_choice",
                f"'none' forbids the final-result tool that output_type asks {choice.model} "
                "for; use 'auto'",
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
        budget = self.thinking.budget_tokens
        if budget is not None and self.max_output_tokens <= budget:
            raise ParamsError(
                "max_output_tokens",
                f"must exceed thinking.budget_tokens ({budget}), got {self.max_output_tokens}",
            )
        for i, choice in enumerate(self.model_chain):
            self._check_family(choice, "model" if i == 0 else f"fallbacks[{i - 1}]")

    def _check_family(self, choice: ModelChoice, field: str) -> None:
        """``thinking`` against the family of one model of the chain."""
        thinking, family = self.thinking, family_of(choice.model)
        if thinking is None or family is None:
            return
        if not family.reasons:
            if field == "model":  # a fallback that does not reason is sent no reasoning
                raise ParamsError(
                    "thinking",
                    f"{choice.model} does not reason: leave thinking=None or pick a "
                    "reasoning model",
                )
            return
        if thinking.effort is not None and family.efforts and thinking.effort not in family.efforts:
            raise ParamsError(
                "thinking.effort",
                f"{choice.model} ({field}) takes effort {', '.join(family.efforts)}, "
                f"got {thinking.effort!r}",
            )
        if thinking.adaptive and not family.adaptive and family.budget:
            raise ParamsError(
                "thinking.adaptive",
                f"{choice.model} ({field}) has no adaptive thinking: give budget_tokens instead",
            )
        takes = (
            (family.budget and thinking.budget_tokens is not None)
            or (family.adaptive and thinking.adaptive)
            or (bool(family.efforts) and thinking.effort is not None)
        )
        if not takes and field == "model":  # a fallback may reason by its own default
            wants = "budget_tokens" if family.budget else "effort"
            raise ParamsError(
                "thinking",
                f"{choice.model} ({field}, {family.name}) takes thinking.{wants}, which is unset",
            )

    @property
    def model_chain(self) -> tuple[ModelChoice, ...]:
        """The primary model followed by the fallbacks, in order."""
        return (self.model, *self.fallbacks)

    def output_tool(self, model: str) -> bool:
        """Whether ``model`` is asked for the typed answer through the final-result tool."""
        return self.output_spec is not None and output_tool_used(self.output_mode, model)

    @property
    def final_result_tool(self) -> bool:
        """Whether a model of the chain is asked for the answer through the final-result
        tool: then a ``final_result`` call is the answer, whichever model makes it."""
        return any(self.output_tool(c.model) for c in self.model_chain)

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


_READS: tuple[tuple[Callable[[HarnessParams[Any]], None], frozenset[str]], ...] = (
    (
        HarnessParams._check_output,
        frozenset({"output_type", "output_mode", "tool_choice", "tools", "model", "fallbacks"}),
    ),
    (HarnessParams._check_strict_models, frozenset({"strict_models", "model", "fallbacks"})),
    (HarnessParams._check_repeated_models, frozenset({"model", "fallbacks"})),
    (HarnessParams._check_context_budget, frozenset({"context_budget", "max_output_tokens"})),
    (HarnessParams._check_timeout_categories, frozenset({"tool_timeouts", "tools"})),
    (HarnessParams._check_tool_choice, frozenset({"tool_choice", "tools"})),
    (
        HarnessParams._check_thinking,
        frozenset(
            {"thinking", "temperature", "tool_choice", "max_output_tokens", "model", "fallbacks"}
        ),
    ),
    (
        HarnessParams._check_prompt_cache,
        frozenset({"cache_tools", "cache_last_user_turn", "prompt_cache"}),
    ),
    (HarnessParams._check_server_tool_names, frozenset({"server_tools", "tools"})),
)
"""The checks across fields in the order ``__attrs_post_init__`` runs them, each with the
fields it reads (through its helpers and properties too): an evolve that changes none of
them leaves its verdict as it was."""


def _across(names: Iterable[str]) -> tuple[Callable[[HarnessParams[Any]], None], ...]:
    """The checks across fields that read any of ``names``, in order."""
    changed = frozenset(names)
    return tuple(check for check, reads in _READS if not reads.isdisjoint(changed))


_FIELDS: tuple[attrs.Attribute[Any], ...] = tuple(attrs.fields(HarnessParams))
_INIT_ORDER: Mapping[str, int] = MappingProxyType(
    {a.name: i for i, a in enumerate(_FIELDS) if a.init}  # no private field: alias = name
)
"""Each field ``__init__`` takes, by its position among the fields."""
_ACROSS: Mapping[str, tuple[Callable[[HarnessParams[Any]], None], ...]] = MappingProxyType(
    {name: _across((name,)) for name in _INIT_ORDER}
)
"""The checks across fields that read each field, in order."""


def _converter(field: attrs.Attribute[Any]) -> Callable[[Any], Any] | None:
    """The field's converter, a function of the value alone (what evolve calls)."""
    convert = field.converter
    if isinstance(convert, attrs.Converter):  # takes self or the field: not here
        raise TypeError(f"HarnessParams.evolve cannot convert {field.name!r} on its own")
    return convert


_CONVERTERS: Mapping[str, Callable[[Any], Any]] = MappingProxyType(
    {a.name: convert for a in _FIELDS if (convert := _converter(a)) is not None}
)
_read_all = operator.attrgetter(*(a.name for a in _FIELDS))
_NAMES = tuple(a.name for a in _FIELDS)
"""The fields in order (``output_spec`` last): an evolve sets each once on the new
instance, as ``__init__`` does, through ``object.__setattr__`` (a frozen class refuses
``setattr``)."""
_set_field = object.__setattr__
