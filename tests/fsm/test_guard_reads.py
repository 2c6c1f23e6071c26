"""The default guards declare what they read, and the declarations match what they touch."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import attrs
import pytest

from innerloop import (
    DEFAULT_SPEC,
    HarnessParams,
    HarnessState,
    Message,
    ModelResponse,
    ProviderError,
    SpecError,
    TransitionSpec,
    compile_spec,
)
from innerloop._errors import ErrorCategory
from innerloop._messages import TextBlock, ToolUseBlock, Usage
from innerloop.fsm import (
    DEFAULT_GUARDS,
    AbortRequest,
    Outcome,
    SpendBudget,
    Task,
    guard,
    guard_info,
)
from innerloop.fsm._output import OUTPUT_TOOL
from innerloop.testing import phase_context


class Recorder:
    """A read-only view of an object that logs the dotted path of every attribute read,
    wrapping attrs instances (params, state, the policy, usage, responses) to go deeper."""

    def __init__(self, target: Any, path: str, log: set[str]) -> None:
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_path", path)
        object.__setattr__(self, "_log", log)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        path = f"{self._path}.{name}" if self._path else name
        self._log.add(path)
        return Recorder(value, path, self._log) if attrs.has(type(value)) else value

    def __setattr__(self, name: str, value: Any) -> None:
        raise AssertionError(f"a guard wrote {self._path}.{name}")


def _params() -> list[HarnessParams]:
    base = HarnessParams(model="scripted:m-20250101")
    return [
        base,
        attrs.evolve(
            base,
            fallbacks=["scripted:n-20250101"],
            context_budget=50_000,
            spend_budget=SpendBudget(max_tokens=1_000, max_cost_usd=1.0),
        ),
    ]


def _states() -> list[HarnessState]:
    call = ToolUseBlock("t1", "search", {})
    final = ToolUseBlock("t2", OUTPUT_TOOL, {"x": 1})
    asks = Message("assistant", (TextBlock("let me look"), call))
    answers = Message("assistant", (final,))
    states = [HarnessState(), HarnessState(abort=AbortRequest("stop"), turns=99)]
    states += [HarnessState(error=ProviderError(c, "boom")) for c in ErrorCategory]
    for message, stop in ((asks, "tool_use"), (answers, "tool_use"), (asks, "max_tokens")):
        response = ModelResponse(message, stop)
        states.append(
            HarnessState(
                history=[Message.user("go"), message],
                last_response=response,
                outcome=Outcome.RESPONSE,
            )
        )
    states.append(HarnessState(last_response=ModelResponse(Message.assistant("hi"), "end_turn")))
    states.append(HarnessState(turns=99, last_response=ModelResponse(answers, "tool_use")))
    states.append(HarnessState(tasks=[Task("1", "a", done=True)], usage=Usage(10, 10)))
    states.append(HarnessState(usage=Usage(2_000, 0), context_tokens=60_000))
    return states


def _touched(name: str) -> set[str]:
    """Every path the guard reads over all the crafted contexts."""
    log: set[str] = set()
    fn = DEFAULT_GUARDS[name]
    for params, state in itertools.product(_params(), _states()):
        fn(Recorder(phase_context(params, state), "", log))  # type: ignore[arg-type]
    return log


def test_every_default_guard_declares_reads() -> None:
    """No default guard is left undeclared."""
    assert [n for n, fn in DEFAULT_GUARDS.items() if not guard_info(fn).reads] == []


@pytest.mark.parametrize("name", sorted(DEFAULT_GUARDS))
def test_declared_reads_match_what_the_guard_touches(name: str) -> None:
    """Each path a guard reads lies under a declared read, and each declared read is
    read on some context (so a declaration cannot rot either way)."""
    declared = guard_info(DEFAULT_GUARDS[name]).reads
    touched = _touched(name)
    undeclared = [
        p
        for p in sorted(touched)
        if not any(p == d or p.startswith(d + ".") or d.startswith(p + ".") for d in declared)
    ]
    stale = [d for d in declared if not any(p == d or p.startswith(d + ".") for p in touched)]
    assert (undeclared, stale) == ([], [])


def test_recorder_catches_an_undeclared_read() -> None:
    """The check can fail: a guard reading a field it does not declare is caught."""
    log: set[str] = set()
    ctx = phase_context(_params()[0], HarnessState(turns=3))
    assert DEFAULT_GUARDS["turn_limit"](Recorder(ctx, "", log)) is False  # type: ignore[arg-type]
    assert log == {"params", "params.max_turns", "state", "state.turns", "state.turns_at_start"}


def test_readme_lists_the_declared_reads() -> None:
    """The machine page's guard table (docs/concepts/machine.md) is generated from the
    declarations (a stale copy fails)."""
    rows = ["| guard | reads | budget |", "|---|---|---|"]
    for name, fn in DEFAULT_GUARDS.items():
        info = guard_info(fn)
        reads = ", ".join(f"`{r}`" for r in info.reads)
        rows.append(f"| `{name}` | {reads} | {info.budget or '-'} |")
    page = Path(__file__).resolve().parents[2] / "docs" / "concepts" / "machine.md"
    assert "\n".join(rows) + "\n" in page.read_text(encoding="utf-8"), (
        "regenerate the guard table of docs/concepts/machine.md"
    )


def test_declared_given_fields_are_read() -> None:
    """A guard's given field is one of its declared reads."""
    for name, fn in DEFAULT_GUARDS.items():
        info = guard_info(fn)
        assert info.given is None or info.given in info.reads, name


@pytest.mark.parametrize(
    "name", sorted(n for n, fn in DEFAULT_GUARDS.items() if guard_info(fn).given is not None)
)
def test_a_guard_never_holds_without_its_given_field(name: str) -> None:
    """While its given field is None, a guard is false on every crafted context (the
    compiled machine skips it then), and it holds on some context where the field is set
    (the declaration skips nothing that could be taken)."""
    fn = DEFAULT_GUARDS[name]
    given = guard_info(fn).given
    assert given is not None
    root, field = given.split(".")
    held = []
    for params, state in itertools.product(_params(), _states()):
        ctx = phase_context(params, state)
        unset = getattr(getattr(ctx, root), field) is None
        assert not (unset and fn(ctx)), (params, state)
        held.append(not unset and fn(ctx))
    assert any(held)


def test_select_skips_a_guard_without_its_given_field() -> None:
    """The compiled machine does not call a guard while its given field is None."""
    calls: list[str] = []

    @guard(reads=("state.error",), given="state.error")
    def errored(ctx: Any) -> bool:
        calls.append("errored")
        return True

    spec = DEFAULT_SPEC.with_guard("errored", errored).add_transition(
        TransitionSpec("check", "abort", "errored")
    )
    machine = compile_spec(spec)
    ctx = phase_context(_params()[0], HarnessState(outcome=Outcome.CHECKED))
    assert machine.select("check", ctx).target == "assemble"
    assert calls == []
    ctx.state.error = ProviderError(ErrorCategory.TRANSIENT, "boom")
    assert machine.select("check", ctx) == TransitionSpec("check", "abort", "errored")
    assert calls == ["errored"]


def test_a_given_field_must_exist() -> None:
    """A given field that neither params nor state has is refused at compile time."""

    @guard(reads=("state.error",), given="state.eror")
    def errored(ctx: Any) -> bool:
        return True

    spec = DEFAULT_SPEC.with_guard("errored", errored).add_transition(
        TransitionSpec("check", "abort", "errored")
    )
    with pytest.raises(SpecError, match=r"declares it reads 'state.eror'.*did you mean"):
        compile_spec(spec)
