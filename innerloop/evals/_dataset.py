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

import datetime
import functools
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import pydantic

from innerloop._errors import InnerloopError
from innerloop._json import MAX_JSON_DEPTH, parse_json
from innerloop.evals._checks import (
    Check,
    CheckContext,
    Contains,
    Equals,
    ExitReason,
    IsInstance,
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
        unknown = sorted(set(data) - _DATASET_KEYS, key=str)
        if unknown:
            raise DatasetError(
                f"{source}: unknown key {str(unknown[0])[:80]!r}; the keys are name, cases, "
                "evaluators, report_evaluators"
            )
        _no_report_evaluators(data.get("report_evaluators"), source)
        named = dict(predicates or {})
        cases = [_case(c, i, source, named) for i, c in enumerate(data["cases"], start=1)]
        evaluators = data.get("evaluators", data.get("checks"))
        checks = _checks(evaluators, f"{source}: evaluators", named)
        return cls(cases, checks, data.get("name"))


_DATASET_KEYS = {"name", "cases", "evaluators", "checks", "report_evaluators", "$schema"}


def _no_report_evaluators(data: Any, source: str) -> None:
    """pydantic-evals writes ``report_evaluators: []`` into every dataset file: an empty
    list (or none) is read; report evaluators themselves are not run, so a file naming one
    is refused, naming it."""
    if data is None or data == []:
        return
    if not isinstance(data, list):
        raise DatasetError(f"{source}: `report_evaluators` must be a list")
    first = data[0]
    name = next(iter(first), first) if isinstance(first, Mapping) else first
    raise DatasetError(
        f"{source}: report_evaluators: {str(name)[:80]} is not supported: innerloop does not "
        "run report evaluators (its report has the pass rate, tokens, cost and latency); "
        "leave the list empty"
    )


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


def _reasons(reasons: str | Sequence[str]) -> ExitReason:
    return ExitReason([reasons] if isinstance(reasons, str) else reasons)


def _label(evaluation_name: Any) -> str | None:
    if evaluation_name is not None and not isinstance(evaluation_name, str):
        raise ValueError(f"evaluation_name must be a string, got {_kind(evaluation_name)}")
    return evaluation_name


def _flag(value: Any, option: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{option} must be true or false, got {_kind(value)}")
    return value


def _kind(value: Any) -> str:
    return f"{type(value).__name__} {repr(value)[:60]}"


# pydantic-evals' evaluators, read as its dataset files write them: the same options, the
# same defaults, the same verdicts (docs/guides/evals.md#dataset-files)


def _equals(value: Any, evaluation_name: str | None = None) -> Check:
    return Equals(value, _label(evaluation_name))


def _equals_expected(evaluation_name: str | None = None) -> Check:
    return Equals(label=_label(evaluation_name))


def _contains(
    value: Any,
    case_sensitive: bool = True,
    as_strings: bool = False,
    evaluation_name: str | None = None,
) -> Check:
    return Contains(
        value,
        _flag(case_sensitive, "case_sensitive"),
        _flag(as_strings, "as_strings"),
        _label(evaluation_name),
    )


def _is_instance(type_name: str, evaluation_name: str | None = None) -> Check:
    if not isinstance(type_name, str) or not type_name:
        raise ValueError(f"type_name must be a type's name, got {_kind(type_name)}")
    return IsInstance(type_name, _label(evaluation_name))


def _max_duration(seconds: Any) -> Check:
    """``seconds``: a number, or an ISO 8601 duration (``PT1M30S``: a timedelta as
    pydantic writes it)."""
    if isinstance(seconds, str):
        try:
            seconds = pydantic.TypeAdapter(datetime.timedelta).validate_python(seconds)
        except pydantic.ValidationError:
            raise ValueError(
                f"seconds must be a number or an ISO 8601 duration, got {_kind(seconds)}"
            ) from None
    if isinstance(seconds, datetime.timedelta):
        seconds = seconds.total_seconds()
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds >= 0:
        raise ValueError(f"seconds must be a number of at least 0, got {_kind(seconds)}")
    return MaxSeconds(float(seconds))


_ASSERTION: Any = {"include_reason": True}


def _llm_judge(
    rubric: str,
    model: str | None = None,
    include_input: bool = False,
    include_expected_output: bool = False,
    model_settings: Any = None,
    score: Any = False,
    assertion: Any = _ASSERTION,
) -> Check:
    """pydantic-evals' ``LLMJudge``, with its defaults: the judge sees the output and
    the rubric, not the case's input nor its expected output unless told to."""
    if not isinstance(rubric, str) or not rubric:
        raise ValueError(f"rubric must be a non-empty string, got {_kind(rubric)}")
    if model is not None and not isinstance(model, str):
        raise ValueError(f"model must be 'provider:model-id', got {_kind(model)}")
    if model_settings:
        raise ValueError(
            "model_settings is not supported: the judge runs on innerloop's own params "
            "(its answer typed, repaired once); leave model_settings out"
        )
    if score is not False:
        raise ValueError(
            "score is not supported: an innerloop check passes or fails and a report has no "
            "scores; leave score out (or false) to check the judge's pass/fail assertion"
        )
    if assertion is False:
        raise ValueError(
            "assertion: false leaves the judge nothing innerloop checks (it reports no "
            "scores); leave assertion out, or give {include_reason: ..., evaluation_name: ...}"
        )
    if not isinstance(assertion, Mapping) or set(assertion) - {"include_reason", "evaluation_name"}:
        raise ValueError(
            "assertion must be false or a mapping of include_reason and evaluation_name, "
            f"got {_kind(assertion)}"
        )
    return Judge(
        rubric,
        model,
        _flag(include_input, "include_input"),
        _flag(include_expected_output, "include_expected_output"),
        _label(assertion.get("evaluation_name")),
        _flag(assertion.get("include_reason", False), "assertion.include_reason"),
    )


_BUILDERS: dict[str, Callable[..., Check]] = {
    "Contains": _contains,
    "Equals": _equals,
    "EqualsExpected": _equals_expected,
    "ExitReason": _reasons,
    "IsInstance": _is_instance,
    "Judge": Judge,
    "LLMJudge": _llm_judge,
    "LlmJudge": _llm_judge,
    "MatchesSchema": MatchesSchema,
    "MaxDuration": _max_duration,
    "MaxSeconds": MaxSeconds,
}
_NO_SPANS = (
    "it reads the run's OpenTelemetry span tree, which an innerloop eval does not record; "
    "check the run with a Predicate (ctx.run.path, ctx.state.history)"
)
_REFUSED = {
    "HasMatchingSpan": _NO_SPANS,
    "ToolCorrectness": _NO_SPANS,
    "TrajectoryMatch": _NO_SPANS,
    "ArgumentCorrectness": _NO_SPANS,
    "MaxToolCalls": _NO_SPANS,
    "MaxModelRequests": _NO_SPANS,
    "Python": "a dataset file is data and an expression in it is never evaluated; register "
    "a function in your code and name it with Predicate: NAME",
    "GEval": "it scores on a scale and an innerloop check passes or fails; use LLMJudge with "
    "a rubric",
}
"""pydantic-evals' evaluators innerloop does not run, and why: a file naming one is
refused when read, in one line naming it (never run as something else)."""


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
    if name in _REFUSED:
        raise DatasetError(f"{where}: {name} is not supported: {_REFUSED[name]}")
    if name == "Predicate":
        builder: Callable[..., Check] | None = functools.partial(_predicate, where, predicates)
    else:
        builder = _BUILDERS.get(str(name))
    if builder is None:
        known = ", ".join(sorted([*_BUILDERS, "Predicate"]))
        raise DatasetError(f"{where}: unknown evaluator {str(name)[:80]!r}; known: {known}")
    _bind(builder, name, args, kwargs, where)
    try:
        return builder(*args, **kwargs)
    except DatasetError:
        raise
    except (TypeError, ValueError) as exc:
        raise DatasetError(f"{where}: {name}: {exc}") from None


def _bind(
    builder: Callable[..., Check],
    name: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    where: str,
) -> None:
    """Refuse options ``name`` does not take, or one it needs missing, naming its options."""
    params = inspect.signature(builder).parameters
    takes = ", ".join(params)
    unknown = [k for k in kwargs if k not in params]
    if unknown:
        raise DatasetError(
            f"{where}: {name} has no option {str(unknown[0])[:80]!r}; it takes {takes}"
        )
    given = {*list(params)[: len(args)], *kwargs}
    missing = [
        p for p, v in params.items() if v.default is inspect.Parameter.empty and p not in given
    ]
    if missing:
        raise DatasetError(f"{where}: {name} needs {missing[0]!r}; it takes {takes}")
