"""Eval datasets: cases (a prompt, an optional expected output, checks), in Python or read
from a YAML or JSON file laid out as pydantic-evals lays out its dataset files (``cases``
with ``name``, ``inputs``, ``expected_output``, ``metadata``, ``evaluators``; dataset-wide
``evaluators``), each evaluator written ``Name``, ``{Name: argument}`` or ``{Name:
{keyword: value}}``. docs/guides/evals.md maps its evaluator names to these checks."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from innerloop._errors import InnerloopError
from innerloop._json import parse_json
from innerloop.evals._checks import (
    Check,
    Contains,
    Equals,
    ExitReason,
    Judge,
    MatchesSchema,
    MaxSeconds,
    Predicate,
)
from innerloop.fsm._locate import import_target

__all__ = ["Case", "Dataset", "DatasetError"]


class DatasetError(InnerloopError, ValueError):
    """An eval dataset (or a case of it) cannot be read; the message names where and why."""


def _check_tuple(checks: Iterable[Check]) -> tuple[Check, ...]:
    return tuple(checks)


def _case_tuple(cases: Iterable[Case]) -> tuple[Case, ...]:
    return tuple(cases)


@attrs.frozen
class Case:
    """One case: the prompt a run starts from, what it should answer, how it is checked."""

    name: str
    prompt: str
    expected_output: Any = None
    checks: tuple[Check, ...] = attrs.field(default=(), converter=_check_tuple)
    metadata: Mapping[str, Any] = attrs.field(factory=dict, converter=dict)


@attrs.frozen
class Dataset:
    """Cases, and the checks every case gets (``checks``, after the case's own)."""

    cases: tuple[Case, ...] = attrs.field(converter=_case_tuple)
    checks: tuple[Check, ...] = attrs.field(default=(), converter=_check_tuple)
    name: str | None = None

    @cases.validator
    def _unique(self, _: Any, cases: tuple[Case, ...]) -> None:
        seen: set[str] = set()
        for case in cases:
            if case.name in seen:
                raise DatasetError(
                    f"two cases are named {case.name!r}; give each a name of its own"
                )
            seen.add(case.name)

    @classmethod
    def load(cls, path: str | Path) -> Dataset:
        """Read a ``.yaml``/``.yml`` (needs PyYAML: ``pip install 'innerloop[evals]'``) or
        ``.json`` dataset file."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise DatasetError(f"{path}: cannot be read: {exc.strerror or exc}") from None
        if path.suffix.lower() in (".yaml", ".yml"):
            data = _yaml(text, path)
        elif path.suffix.lower() == ".json":
            try:
                data = parse_json(text)
            except ValueError as exc:
                raise DatasetError(f"{path}: not JSON: {exc}") from None
        else:
            raise DatasetError(f"{path}: a dataset file ends in .yaml, .yml or .json")
        return cls.from_data(data, source=str(path))

    @classmethod
    def from_data(cls, data: Any, *, source: str = "dataset") -> Dataset:
        """A dataset from the plain data of a file (a mapping with ``cases``)."""
        if not isinstance(data, Mapping) or not isinstance(data.get("cases"), list):
            raise DatasetError(f"{source}: expected a mapping with a list of `cases`")
        unknown = sorted(set(data) - {"name", "cases", "evaluators", "checks", "$schema"})
        if unknown:
            raise DatasetError(
                f"{source}: unknown key {unknown[0]!r}; the keys are name, cases, evaluators"
            )
        cases = [_case(c, i, source) for i, c in enumerate(data["cases"], start=1)]
        checks = _checks(data.get("evaluators", data.get("checks")), f"{source}: evaluators")
        return cls(cases, checks, data.get("name"))


def _yaml(text: str, path: Path) -> Any:
    try:
        import yaml
    except ImportError:
        raise DatasetError(
            f"{path}: reading YAML needs PyYAML; pip install 'innerloop[evals]' "
            "(or give a .json file)"
        ) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise DatasetError(f"{path}: not YAML: {exc}") from None
    _within_alias_budget(data, path)
    return data


YAML_ALIAS_BUDGET = 100_000
"""How many values a YAML dataset's aliases may add to it: with every alias expanded (a
value counted each time it is used, a string one value per 100 characters), the file holds
at most this many values more than it spells out."""


def _within_alias_budget(data: Any, path: Path) -> None:
    """Refuse a YAML document whose aliases expand it past :data:`YAML_ALIAS_BUDGET`, or
    that holds itself. A shared value is measured once, so a bomb costs no more to measure
    than to read."""
    expanded: dict[int, int] = {}  # id of a list or mapping -> its values, aliases expanded
    long_strings: set[int] = set()  # ids of the strings past 100 characters, counted once
    written = 0
    on_path: set[int] = set()
    todo: list[tuple[Any, bool]] = [(data, False)]
    while todo:
        node, done = todo.pop()
        key = id(node)
        children = list(node.values()) if isinstance(node, dict) else node
        if done:
            on_path.discard(key)
            size = 1 + (len(node) if isinstance(node, dict) else 0)
            written += size
            for child in children:
                if isinstance(child, (list, dict)):
                    size += expanded[id(child)]
                    continue
                weight = _weight(child)
                size += weight
                if weight == 1:
                    written += 1
                elif id(child) not in long_strings:
                    long_strings.add(id(child))
                    written += weight
            expanded[key] = size
            continue
        if key in expanded:
            continue
        if key in on_path:
            raise DatasetError(f"{path}: a YAML alias refers to a value that holds it")
        on_path.add(key)
        todo.append((node, True))
        todo.extend((c, False) for c in children if isinstance(c, (list, dict)))
    added = expanded.get(id(data), written) - written
    if added > YAML_ALIAS_BUDGET:
        raise DatasetError(
            f"{path}: its YAML aliases expand it by {added:,} values, past the "
            f"{YAML_ALIAS_BUDGET:,} a dataset may add through aliases (YAML_ALIAS_BUDGET); "
            "write the values out, or share less"
        )


def _weight(value: Any) -> int:
    return 1 + len(value) // 100 if isinstance(value, str) else 1


_CASE_KEYS = {"name", "inputs", "prompt", "expected_output", "metadata", "evaluators", "checks"}


def _case(data: Any, index: int, source: str) -> Case:
    where = f"{source}: case {index}"
    if not isinstance(data, Mapping):
        raise DatasetError(f"{where}: expected a mapping with `inputs` (the prompt)")
    name = str(data.get("name") or f"case {index}")
    where = f"{source}: case {name!r}"
    unknown = sorted(set(data) - _CASE_KEYS)
    if unknown:
        raise DatasetError(
            f"{where}: unknown key {unknown[0]!r}; a case has name, inputs, expected_output, "
            "metadata, evaluators"
        )
    prompt = data.get("inputs", data.get("prompt"))
    if isinstance(prompt, Mapping) and isinstance(prompt.get("prompt"), str):
        prompt = prompt["prompt"]
    if not isinstance(prompt, str) or not prompt:
        raise DatasetError(
            f"{where}: `inputs` must be the prompt, a non-empty string (or a mapping with a "
            f"`prompt` string), got {type(prompt).__name__}"
        )
    checks = _checks(data.get("evaluators", data.get("checks")), f"{where}: evaluators")
    metadata = data.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        raise DatasetError(f"{where}: `metadata` must be a mapping")
    return Case(name, prompt, data.get("expected_output"), checks, metadata)


def _checks(data: Any, where: str) -> list[Check]:
    if data is None:
        return []
    if not isinstance(data, list):
        raise DatasetError(f"{where}: expected a list of evaluators")
    return [_check(item, f"{where}[{i}]") for i, item in enumerate(data)]


def _predicate(target: str) -> Predicate:
    fn = import_target(target, "predicate", "Predicate", "mypkg.evals:is_polite", None)
    if not callable(fn):
        raise ValueError(f"{target} is not a function")
    return Predicate(fn, target.rpartition(":")[2])


def _reasons(*reasons: str | Sequence[str]) -> ExitReason:
    flat = [r for item in reasons for r in ([item] if isinstance(item, str) else item)]
    return ExitReason(flat)


def _judge(
    rubric: str,
    model: str | None = None,
    include_input: bool = True,
    include_expected_output: bool = True,
) -> Judge:
    return Judge(rubric, model, include_input, include_expected_output)


_BUILDERS: dict[str, Callable[..., Check]] = {
    "Contains": Contains,
    "Equals": Equals,
    "EqualsExpected": Equals,
    "ExitReason": _reasons,
    "Judge": Judge,
    "LLMJudge": _judge,
    "LlmJudge": _judge,
    "MatchesSchema": MatchesSchema,
    "MaxDuration": MaxSeconds,
    "MaxSeconds": MaxSeconds,
    "Predicate": _predicate,
}
_UNSUPPORTED = {
    "IsInstance": "the output is JSON data or text here; use MatchesSchema",
    "HasMatchingSpan": "innerloop checks the run's transitions; use Predicate on ctx.run.path",
    "Python": "an expression is not evaluated from a file; use Predicate: 'module:function'",
}


def _check(item: Any, where: str) -> Check:
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = {}
    if isinstance(item, str):
        name = item
    elif isinstance(item, Mapping) and len(item) == 1:
        ((name, arg),) = item.items()
        args, kwargs = ((), dict(arg)) if isinstance(arg, Mapping) else ((arg,), {})
        if name == "MatchesSchema" and "schema" not in kwargs:
            args, kwargs = (kwargs,), {}  # {MatchesSchema: {type: object, ...}}: the schema
    else:
        raise DatasetError(
            f"{where}: an evaluator is Name, {{Name: argument}} or {{Name: {{...}}}}"
        )
    if name in _UNSUPPORTED:
        raise DatasetError(f"{where}: {name} is not supported: {_UNSUPPORTED[name]}")
    builder = _BUILDERS.get(str(name))
    if builder is None:
        raise DatasetError(
            f"{where}: unknown evaluator {name!r}; known: {', '.join(sorted(_BUILDERS))}"
        )
    try:
        return builder(*args, **kwargs)
    except (TypeError, ValueError) as exc:
        raise DatasetError(f"{where}: {name}: {exc}") from None
