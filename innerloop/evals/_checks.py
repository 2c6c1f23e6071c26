"""The checks an eval case's run must pass: equality, containment, a JSON schema, a Python
predicate, a judge model, the exit reason, a time limit.

Each check is a frozen object with a ``name`` and ``async evaluate(ctx) -> CheckResult |
None`` (None: the check does not apply to this case, say equality to an expected output
the case does not give). Any object of that shape is a check too.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import reprlib
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from typing import Any, Protocol, TypeVar, runtime_checkable

import attrs
import jsonschema
import regex
from pydantic import BaseModel, TypeAdapter

from innerloop._json import parse_json
from innerloop.evals._summary import RunSummary
from innerloop.fsm._state import HarnessState

__all__ = [
    "Check",
    "CheckContext",
    "CheckResult",
    "Contains",
    "Equals",
    "ExitReason",
    "IsInstance",
    "Judge",
    "JudgeVerdict",
    "MatchesSchema",
    "MaxSeconds",
    "Predicate",
]


REASON_CHARS = 2_000
"""A check's reason and a case's error are cut to this many characters (a report renders
every one of them)."""


def bounded(text: str, limit: int = REASON_CHARS) -> str:
    """``text``, cut to ``limit`` characters (saying how many more there were)."""
    text = str(text)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit:,} more characters)"


@attrs.frozen
class CheckResult:
    """How one check went on one case."""

    name: str
    passed: bool
    reason: str = attrs.field(default="", converter=bounded)
    cost_usd: float | None = 0.0
    """What the check itself cost (a judge's model calls; None when unpriced)."""
    tokens: int = 0

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


class JudgeVerdict(BaseModel):
    """What a judge model answers (its typed output)."""

    passed: bool
    reason: str


AskJudge = Callable[[str | None, str], Awaitable[HarnessState[JudgeVerdict]]]
"""``ask(model, prompt)``: a judge run's final state (``model`` None: the default)."""


@attrs.frozen
class CheckContext:
    """What a check sees of one case and its run."""

    case_name: str
    prompt: str
    expected_output: Any
    run: RunSummary
    state: HarnessState[Any]
    ask_judge: AskJudge

    @property
    def output(self) -> Any:
        return self.run.output


@runtime_checkable
class Check(Protocol):
    """A check: a ``name`` and ``evaluate(ctx)``."""

    @property
    def name(self) -> str: ...

    async def evaluate(self, ctx: CheckContext) -> CheckResult | None: ...


def _strings(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(map(str, values))


def _mapping(value: Mapping[str, Any]) -> dict[str, Any]:
    return dict(value)


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother, _REPR.maxlong = 3, 80, 80, 40
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = 6


def _short(value: Any, limit: int = 80) -> str:
    """A repr of ``value`` cut to ``limit`` characters, built without rendering the whole
    value (a YAML alias can make a small file's value billions of items long)."""
    text = _REPR.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


T = TypeVar("T")


async def off_the_loop(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in a thread of its own, awaited: a slow check leaves the event loop
    (the other cases, the progress bar) running, and a caller's time limit can give up on
    it. The thread is a daemon: one still running when the program ends does not hold it."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(result: Any, error: BaseException | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    def work() -> None:
        result: Any = None
        error: BaseException | None = None
        try:
            result = fn(*args)
        except BaseException as exc:  # handed to the awaiting task, which raises it
            error = exc
        with contextlib.suppress(RuntimeError):  # a loop closed meanwhile: nobody waits
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=work, name="innerloop-check", daemon=True).start()
    return await future


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


_UNSET: Any = _Unset()


@attrs.frozen
class Equals:
    """The output equals ``value`` (without one: the case's ``expected_output``; a case
    without an expected output is not checked). ``label`` names the check in a report
    (pydantic-evals' ``evaluation_name``)."""

    value: Any = _UNSET
    label: str | None = None

    @property
    def name(self) -> str:
        return self.label or ("equals" if self.value is not _UNSET else "equals_expected")

    async def evaluate(self, ctx: CheckContext) -> CheckResult | None:
        want = ctx.expected_output if self.value is _UNSET else self.value
        if self.value is _UNSET and want is None:
            return None
        got = ctx.output
        if got == want:
            return CheckResult(self.name, True)
        return CheckResult(self.name, False, f"expected {_short(want)}, got {_short(got)}")


@attrs.frozen
class Contains:
    """The output contains ``value``, as pydantic-evals' ``Contains`` decides: a string in
    a text output (or, with ``as_strings``, ``str(value)`` in ``str(output)``) as a
    substring, ``case_sensitive`` or not; in a typed output (an instance of the params'
    ``output_type``, as a mapping of its fields), a mapping's key-value pairs among its
    fields, any other value among their names; an item among a list's items."""

    value: Any
    case_sensitive: bool = True
    as_strings: bool = False
    label: str | None = None

    @property
    def name(self) -> str:
        return self.label or "contains"

    async def evaluate(self, ctx: CheckContext) -> CheckResult | None:
        out = ctx.state.output if ctx.state.output is not None else ctx.output
        problem = _missing(out, self.value, self.case_sensitive, self.as_strings)
        return CheckResult(self.name, problem is None, problem or "")


def _missing(out: Any, value: Any, case_sensitive: bool, as_strings: bool) -> str | None:
    """Why ``out`` does not contain ``value`` (None when it does): :class:`Contains`."""
    if as_strings or (isinstance(value, str) and isinstance(out, str)):
        text, needle = str(out), str(value)
        if not case_sensitive:
            text, needle = text.lower(), needle.lower()  # lower(), as pydantic-evals
        return None if needle in text else f"{_short(value)} not in {_short(out)}"
    if isinstance(out, BaseModel) or dataclasses.is_dataclass(out):
        out = TypeAdapter(type(out)).dump_python(out)
    try:
        if not isinstance(out, Mapping):
            return None if value in out else f"{_short(value)} not in {_short(out)}"
        if not isinstance(value, Mapping):
            return None if value in out else f"{_short(value)} is not a key of {_short(out)}"
        for key, want in value.items():
            if key not in out:
                return f"no key {_short(key)} in {_short(out)}"
            if out[key] != want:
                return f"{_short(key)} is {_short(out[key])}, not {_short(want)}"
        return None
    except (TypeError, ValueError) as exc:  # an unhashable key, a number as the output...
        return f"cannot look for {_short(value)} in {_short(out)}: {exc}"


@attrs.frozen
class IsInstance:
    """The output's type, or one of its bases, is named ``type_name`` (its name or
    qualified name; pydantic-evals' ``IsInstance``). The output is the typed answer (an
    instance of the params' ``output_type``) when there is one, else the text (``str``).
    Only names are compared: nothing is imported."""

    type_name: str
    label: str | None = None

    @property
    def name(self) -> str:
        return self.label or "is_instance"

    async def evaluate(self, ctx: CheckContext) -> CheckResult | None:
        out = ctx.state.output if ctx.state.output is not None else ctx.output
        kind = type(out)
        if any(self.type_name in (c.__name__, c.__qualname__) for c in kind.__mro__):
            return CheckResult(self.name, True)
        return CheckResult(self.name, False, f"the output is a {kind.__qualname__}")


class _PatternTimeout(Exception):
    def __init__(self, pattern: str) -> None:
        super().__init__(pattern)
        self.pattern = pattern


class _Patterns:
    """``pattern``, ``patternProperties`` and ``additionalProperties`` matched with the
    ``regex`` module under one deadline, instead of ``re`` (which can backtrack for ever on
    a pattern from data, holding the interpreter)."""

    def __init__(self, seconds: float) -> None:
        self.deadline = time.monotonic() + seconds

    def search(self, pattern: str, text: str) -> bool:
        left = max(0.0, self.deadline - time.monotonic())
        try:
            return regex.search(pattern, text, timeout=left, concurrent=True) is not None
        except TimeoutError:
            raise _PatternTimeout(pattern) from None

    def pattern(self, v: Any, pattern: str, instance: Any, schema: Any) -> Iterator[Any]:
        if v.is_type(instance, "string") and not self.search(pattern, instance):
            yield jsonschema.ValidationError(f"{_short(instance)} does not match {pattern!r}")

    def pattern_properties(
        self, v: Any, patterns: Mapping[str, Any], instance: Any, schema: Any
    ) -> Iterator[Any]:
        if not v.is_type(instance, "object"):
            return
        for pattern, subschema in patterns.items():
            for key, value in instance.items():
                if self.search(pattern, key):
                    yield from v.descend(value, subschema, path=key, schema_path=pattern)

    def additional_properties(
        self, v: Any, allowed: Any, instance: Any, schema: Any
    ) -> Iterator[Any]:
        if not v.is_type(instance, "object"):
            return
        named, patterns = schema.get("properties", {}), list(schema.get("patternProperties", {}))
        extras = sorted(
            (
                k
                for k in instance
                if k not in named and not any(self.search(p, k) for p in patterns)
            ),
            key=str,
        )
        if v.is_type(allowed, "object"):
            for extra in extras:
                yield from v.descend(instance[extra], allowed, path=extra)
        elif not allowed and extras:
            unexpected = ", ".join(_short(e) for e in extras[:6])
            yield jsonschema.ValidationError(
                f"additional properties are not allowed ({unexpected} unexpected)"
            )

    def validator(self, schema: Mapping[str, Any]) -> Any:
        base = jsonschema.validators.validator_for(schema)
        keywords = {
            "pattern": self.pattern,
            "patternProperties": self.pattern_properties,
            "additionalProperties": self.additional_properties,
        }
        return jsonschema.validators.extend(base, keywords)(schema)


def _keywords(schema: Any) -> Iterator[str]:
    todo = [schema]
    while todo:
        node = todo.pop()
        if isinstance(node, Mapping):
            yield from (k for k in node if isinstance(k, str))
            todo.extend(node.values())
        elif isinstance(node, list):
            todo.extend(node)


PATTERN_SECONDS = 1.0
"""How long the patterns of one ``MatchesSchema`` may take over one output, in all."""


@attrs.frozen
class MatchesSchema:
    """The output is JSON matching ``schema`` (a typed output's data, or the text parsed
    as JSON). The schema is checked when the check is built. Its patterns are matched by
    the ``regex`` module, within ``pattern_seconds`` in all (past that the check fails,
    naming the pattern): a pattern from a data file cannot hold the eval."""

    schema: Mapping[str, Any] = attrs.field(converter=_mapping)
    pattern_seconds: float = PATTERN_SECONDS

    @schema.validator
    def _valid(self, _: Any, schema: dict[str, Any]) -> None:
        try:
            jsonschema.validators.validator_for(schema).check_schema(schema)
        except jsonschema.SchemaError as exc:
            raise ValueError(f"MatchesSchema: the schema is not valid: {exc.message}") from None
        used = set(_keywords(schema))
        if "unevaluatedProperties" in used and "patternProperties" in used:
            raise ValueError(
                "MatchesSchema: unevaluatedProperties with patternProperties is not supported "
                "(its patterns would be matched without a time limit); list the properties, "
                "or use additionalProperties"
            )

    @property
    def name(self) -> str:
        return "matches_schema"

    async def evaluate(self, ctx: CheckContext) -> CheckResult | None:
        return await off_the_loop(self.check, ctx.output)

    def check(self, data: Any) -> CheckResult:
        """The check itself, on the output ``data`` (run off the event loop)."""
        if isinstance(data, str):
            try:
                data = parse_json(data)
            except ValueError as exc:
                return CheckResult(self.name, False, f"the output is not JSON: {exc}")
        validator = _Patterns(self.pattern_seconds).validator(self.schema)
        try:
            problems = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
        except _PatternTimeout as exc:
            return CheckResult(
                self.name,
                False,
                f"the pattern {_short(exc.pattern)} took over {self.pattern_seconds} s on the "
                "output (MatchesSchema's pattern_seconds)",
            )
        if not problems:
            return CheckResult(self.name, True)
        first = problems[0]
        where = "/".join(map(str, first.absolute_path)) or "(root)"
        return CheckResult(self.name, False, f"{where}: {first.message}")


@attrs.frozen
class Predicate:
    """``fn(ctx)`` holds: a function of the :class:`CheckContext` returning a bool (or a
    str, a reason to fail; '' passes)."""

    fn: Callable[[CheckContext], bool | str]
    label: str | None = None

    @property
    def name(self) -> str:
        return self.label or str(getattr(self.fn, "__name__", "predicate"))

    async def evaluate(self, ctx: CheckContext) -> CheckResult | None:
        verdict = await off_the_loop(self.fn, ctx)
        if isinstance(verdict, str):
            return CheckResult(self.name, not verdict, verdict)
        return CheckResult(self.name, bool(verdict), "" if verdict else "the predicate is false")


@attrs.frozen
class ExitReason:
    """The run ended in one of ``reasons``. A case without an ``ExitReason`` check must end
    in ``model_complete`` or ``tasks_complete``."""

    reasons: tuple[str, ...] = attrs.field(converter=_strings)

    @property
    def name(self) -> str:
        return "exit_reason"

    async def evaluate(self, ctx: CheckContext) -> CheckResult | None:
        got = ctx.run.exit_reason
        if got in self.reasons:
            return CheckResult(self.name, True)
        want = " or ".join(self.reasons)
        return CheckResult(self.name, False, f"the run ended in {got}, not {want}")


FINISHED = ExitReason(("model_complete", "tasks_complete"))


@attrs.frozen
class MaxSeconds:
    """The run took at most ``seconds`` of wall time."""

    seconds: float

    @property
    def name(self) -> str:
        return "max_seconds"

    async def evaluate(self, ctx: CheckContext) -> CheckResult | None:
        took = ctx.run.seconds or 0.0
        if took <= self.seconds:
            return CheckResult(self.name, True)
        return CheckResult(self.name, False, f"took {took:.3f} s, over {self.seconds} s")


JUDGE_SYSTEM = (
    "You grade the answer of an AI assistant against a rubric. Answer with JSON: "
    '{"passed": true or false, "reason": "one sentence"}.'
)


@attrs.frozen
class Judge:
    """A judge model grades the output against ``rubric``. It runs through innerloop, on
    any provider: ``model`` (``"provider:model-id"``) or the eval's judge model, with the
    eval's judge providers. Its answer is typed (:class:`JudgeVerdict`), repaired once
    when malformed; its tokens and cost are the check's own."""

    rubric: str
    model: str | None = None
    include_prompt: bool = True
    include_expected: bool = True
    label: str | None = None
    """The check's name in a report (default ``judge``)."""
    include_reason: bool = True
    """Whether the report keeps the judge's reason."""

    @property
    def name(self) -> str:
        return self.label or "judge"

    def prompt(self, ctx: CheckContext) -> str:
        """What the judge is asked."""
        parts = [f"<rubric>\n{self.rubric}\n</rubric>"]
        if self.include_prompt:
            parts.append(f"<prompt>\n{ctx.prompt}\n</prompt>")
        if self.include_expected and ctx.expected_output is not None:
            parts.append(f"<expected>\n{_as_text(ctx.expected_output)}\n</expected>")
        parts.append(f"<answer>\n{_as_text(ctx.output)}\n</answer>")
        return "\n".join(parts)

    async def evaluate(self, ctx: CheckContext) -> CheckResult | None:
        state = await ctx.ask_judge(self.model, self.prompt(ctx))
        tokens, cost = state.usage.total_tokens, state.cost_usd
        verdict = state.output
        if verdict is None:
            raise RuntimeError(
                f"the judge gave no verdict (its run ended in {state.exit_reason}); check the "
                "judge model and providers"
            )
        reason = verdict.reason if self.include_reason else ""
        return CheckResult(self.name, verdict.passed, reason, cost, tokens)


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)
