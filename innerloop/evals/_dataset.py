"""Eval datasets: cases (a prompt, an optional expected output, checks), in Python or read
from a YAML or JSON file laid out as pydantic-evals lays out its dataset files (``cases``
with ``name``, ``inputs``, ``expected_output``, ``metadata``, ``evaluators``; dataset-wide
``evaluators``), each evaluator written ``Name``, ``{Name: argument}`` or ``{Name:
{keyword: value}}``. docs/guides/evals.md maps its evaluator names to these checks.

A dataset file is data: nothing it names is imported, called or evaluated. A ``Predicate``
in a file names a function the reader's code registers (``predicates=`` of
:meth:`Dataset.load`, ``--predicates`` of ``innerloop eval``); a name not registered is
refused in one line saying what to pass."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from innerloop._errors import InnerloopError
from innerloop._json import MAX_JSON_DEPTH, parse_json
from innerloop.evals._checks import (
    Check,
    CheckContext,
    Contains,
    Equals,
    ExitReason,
    Judge,
    MatchesSchema,
    MaxSeconds,
    Predicate,
)

__all__ = ["Case", "Dataset", "DatasetError"]

Predicates = Mapping[str, Callable[[CheckContext], bool | str]]
"""The functions a dataset file's ``Predicate: NAME`` may name, by name: the reader's own
code registers them; the file only picks among them."""


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
    def load(cls, path: str | Path, *, predicates: Predicates | None = None) -> Dataset:
        """Read a ``.yaml``/``.yml`` (needs PyYAML: ``pip install 'innerloop[evals]'``) or
        ``.json`` dataset file. Its ``Predicate: NAME`` checks are the functions of
        ``predicates`` by name (nothing named in a file is imported)."""
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
        return cls.from_data(data, source=str(path), predicates=predicates)

    @classmethod
    def from_data(
        cls, data: Any, *, source: str = "dataset", predicates: Predicates | None = None
    ) -> Dataset:
        """A dataset from the plain data of a file (a mapping with ``cases``); its
        ``Predicate: NAME`` checks are the functions of ``predicates`` by name."""
        _plain_tree(data, source)
        if not isinstance(data, Mapping) or not isinstance(data.get("cases"), list):
            raise DatasetError(f"{source}: expected a mapping with a list of `cases`")
        unknown = sorted(set(data) - {"name", "cases", "evaluators", "checks", "$schema"})
        if unknown:
            raise DatasetError(
                f"{source}: unknown key {unknown[0]!r}; the keys are name, cases, evaluators"
            )
        named = dict(predicates or {})
        cases = [_case(c, i, source, named) for i, c in enumerate(data["cases"], start=1)]
        evaluators = data.get("evaluators", data.get("checks"))
        checks = _checks(evaluators, f"{source}: evaluators", named)
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
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise DatasetError(f"{path}: not YAML: {exc}") from None
    except RecursionError:
        raise DatasetError(
            f"{path}: nested too deep to read (a dataset nests at most {MAX_JSON_DEPTH} levels)"
        ) from None


YAML_ALIAS_BUDGET = 100_000
"""How many values a YAML dataset's aliases may add to it: with every alias expanded (a
value counted each time it is used, a string one value per 100 characters), the file holds
at most this many values more than it spells out."""


def _plain_tree(data: Any, source: str) -> None:
    """Refuse data nested deeper than MAX_JSON_DEPTH levels of lists and mappings, that
    holds itself (a YAML alias inside its own anchor), or whose aliases expand it past
    :data:`YAML_ALIAS_BUDGET`: what reads it later (schemas, comparisons, reports) would
    recurse without end or render without bound. Each value shared by aliases is walked
    and measured once, so a bomb costs no more to check than to read."""
    tree = _Measures()
    open_ids: set[int] = set()
    stack: list[tuple[Any, bool]] = [(data, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        children = list(node.values()) if isinstance(node, dict) else node
        if done:
            open_ids.discard(key)
            if tree.measure(node, children) > MAX_JSON_DEPTH:
                raise DatasetError(
                    f"{source}: nested deeper than {MAX_JSON_DEPTH} levels of lists and mappings"
                )
            continue
        if key in tree.expanded:
            continue
        if key in open_ids:
            raise DatasetError(
                f"{source}: a value holds itself (a YAML alias inside its own anchor); a "
                "dataset is a tree of plain values"
            )
        open_ids.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in children if isinstance(c, list | dict))
    added = tree.expanded.get(id(data), tree.written) - tree.written
    if added > YAML_ALIAS_BUDGET:
        raise DatasetError(
            f"{source}: its YAML aliases expand it by {added:,} values, past the "
            f"{YAML_ALIAS_BUDGET:,} a dataset may add through aliases (YAML_ALIAS_BUDGET); "
            "write the values out, or share less"
        )


class _Measures:
    """What :func:`_plain_tree` learns of each list and mapping, children first: its
    height, its values with every alias expanded, and the values the file spells out."""

    def __init__(self) -> None:
        self.height: dict[int, int] = {}
        self.expanded: dict[int, int] = {}
        self.long_strings: set[int] = set()  # ids of strings past 100 characters, counted once
        self.written = 0

    def measure(self, node: Any, children: Any) -> int:
        """Books ``node`` (its children measured already); its height."""
        size, below = 1 + (len(node) if isinstance(node, dict) else 0), 0
        self.written += size
        for child in children:
            if isinstance(child, list | dict):
                size += self.expanded[id(child)]
                below = max(below, self.height[id(child)])
                continue
            weight = _weight(child)
            size += weight
            if weight == 1:
                self.written += 1
            elif id(child) not in self.long_strings:
                self.long_strings.add(id(child))
                self.written += weight
        self.expanded[id(node)], self.height[id(node)] = size, 1 + below
        return 1 + below


def _weight(value: Any) -> int:
    return 1 + len(value) // 100 if isinstance(value, str) else 1


_CASE_KEYS = {"name", "inputs", "prompt", "expected_output", "metadata", "evaluators", "checks"}


def _case(data: Any, index: int, source: str, predicates: Predicates) -> Case:
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
    checks = _checks(data.get("evaluators", data.get("checks")), f"{where}: evaluators", predicates)
    metadata = data.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        raise DatasetError(f"{where}: `metadata` must be a mapping")
    return Case(name, prompt, data.get("expected_output"), checks, metadata)


def _checks(data: Any, where: str, predicates: Predicates) -> list[Check]:
    if data is None:
        return []
    if not isinstance(data, list):
        raise DatasetError(f"{where}: expected a list of evaluators")
    return [_check(item, f"{where}[{i}]", predicates) for i, item in enumerate(data)]


def _predicate(where: str, predicates: Predicates, name: Any, label: str | None = None) -> Check:
    """The registered function a file's ``Predicate: NAME`` names (never imported)."""
    fn = predicates.get(name) if isinstance(name, str) else None
    if fn is None:
        shown = repr(name)[:120]
        known = f" (registered: {', '.join(sorted(predicates))[:200]})" if predicates else ""
        raise DatasetError(
            f"{where}: Predicate {shown} is not registered{known}; a dataset file is data and "
            "names only the predicates your code registers: pass predicates={"
            f"{shown}: fn}} to Dataset.load, or --predicates MODULE:ATTR (a mapping of names "
            "to functions) to innerloop eval"
        )
    return Predicate(fn, label or name.rpartition(":")[2])


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
}
_UNSUPPORTED = {
    "IsInstance": "the output is JSON data or text here; use MatchesSchema",
    "HasMatchingSpan": "innerloop checks the run's transitions; use Predicate on ctx.run.path",
    "Python": "an expression is not evaluated from a file; use Predicate: NAME (registered)",
}


def _check(item: Any, where: str, predicates: Predicates) -> Check:
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
    if name == "Predicate":
        builder: Callable[..., Check] | None = functools.partial(_predicate, where, predicates)
    else:
        builder = _BUILDERS.get(str(name))
    if builder is None:
        known = ", ".join(sorted([*_BUILDERS, "Predicate"]))
        raise DatasetError(f"{where}: unknown evaluator {name!r}; known: {known}")
    try:
        return builder(*args, **kwargs)
    except DatasetError:
        raise
    except (TypeError, ValueError) as exc:
        raise DatasetError(f"{where}: {name}: {exc}") from None
