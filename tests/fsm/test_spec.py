"""The spec as data: compile checks, editing without mutation, custom states."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import attrs
import pytest

from innerloop import (
    DEFAULT_SPEC,
    HarnessParams,
    HarnessState,
    SpecError,
    StateSpec,
    TransitionSpec,
    compile_spec,
)
from innerloop.fsm import Outcome, PhaseContext
from innerloop.testing import ScriptedProvider, machine_at, reply, tool_call
from innerloop.tools import ToolContext, ToolOutput, ToolSpec

T = TransitionSpec


async def _noop(ctx: PhaseContext) -> None:
    return None


def test_default_spec_compiles_to_statemachine_class() -> None:
    """The default spec compiles into a python-statemachine class with every state."""
    compiled = compile_spec(DEFAULT_SPEC)
    names = {s.value for s in compiled.machine_class.states}
    assert names == set(DEFAULT_SPEC.state_names)
    phases = {"assemble", "normalize", "call", "stream", "execute", "check"}
    recovery = {"compact", "backoff", "fallback", "abort"}
    assert phases | recovery <= names
    assert {s.name: s.exit_reason for s in DEFAULT_SPEC.final_states} == {
        "model_complete": "model_complete",
        "tasks_complete": "tasks_complete",
        "max_turns_exceeded": "max_turns_exceeded",
        "budget_exceeded": "budget_exceeded",
        "aborted": "aborted",
        "failed": "failed",
        "suspended": "suspended",
    }


def test_unreachable_state_rejected() -> None:
    """A state nothing leads to is named in the error."""
    spec = DEFAULT_SPEC.add_state(StateSpec("orphan"), _noop, [T("orphan", "check")])
    with pytest.raises(SpecError) as info:
        compile_spec(spec)
    assert info.value.rule == "unreachable"
    assert str(info.value) == (
        "state 'orphan' cannot be reached from 'idle'; add a transition into it or remove it"
    )


def test_state_without_path_to_final_rejected() -> None:
    """Two states looping forever with no way out are rejected."""
    spec = (
        DEFAULT_SPEC.add_state(StateSpec("spin"), _noop, [T("spin", "spin2")])
        .add_state(StateSpec("spin2"), _noop, [T("spin2", "spin")])
        .add_transition(T("check", "spin", "tasks_complete"), before=T("check", "assemble"))
    )
    with pytest.raises(SpecError) as info:
        compile_spec(spec)
    assert info.value.rule == "no-path-to-final"
    assert info.value.states == ("spin", "spin2")
    assert "state 'spin', 'spin2' has no path to a final state" in str(info.value)


def test_unknown_guard_rejected() -> None:
    """A guard name that resolves to nothing is named, with the known guards."""
    spec = DEFAULT_SPEC.add_transition(
        T("check", "model_complete", "looks_done"), before=T("check", "assemble")
    )
    with pytest.raises(SpecError) as info:
        compile_spec(spec)
    assert info.value.rule == "unknown-guard"
    assert str(info.value).startswith(
        "transition check -> model_complete [looks_done] names guard 'looks_done', which "
        "resolves to nothing; add it with with_guard() (known guards: abort_requested, "
    )


def test_missing_handler_rejected() -> None:
    """A non-final state without a handler is rejected."""
    spec = DEFAULT_SPEC.add_state(StateSpec("lonely"), None, [T("lonely", "check")])
    spec = spec.add_transition(
        T("execute", "lonely", "has_tool_calls"), before=T("execute", "check")
    )
    with pytest.raises(SpecError, match=r"state 'lonely' has no phase handler"):
        compile_spec(spec)


def test_guarded_last_transition_rejected() -> None:
    """A state whose every edge is guarded could stall: rejected."""
    spec = DEFAULT_SPEC.remove_transition(T("backoff", "call"))
    with pytest.raises(SpecError) as info:
        compile_spec(spec)
    assert info.value.rule == "no-fallthrough"


def test_final_state_needs_exit_reason() -> None:
    """Every final state must carry its exit reason."""
    spec = DEFAULT_SPEC.add_state(StateSpec("gone", "final")).add_transition(
        T("check", "gone", "tasks_complete"), before=T("check", "assemble")
    )
    with pytest.raises(SpecError, match=r"final state 'gone' has no exit_reason"):
        compile_spec(spec)


def test_undeclared_state_in_transition_rejected() -> None:
    """A transition to a state that does not exist names it."""
    spec = DEFAULT_SPEC.add_transition(T("check", "nowhere", "tasks_complete"))
    with pytest.raises(SpecError, match=r"refers to undeclared state 'nowhere'"):
        compile_spec(spec)


def test_editing_never_mutates_the_default() -> None:
    """Every edit returns a new spec; DEFAULT_SPEC stays as it was."""
    before = (DEFAULT_SPEC.states, DEFAULT_SPEC.transitions, dict(DEFAULT_SPEC.handlers))
    DEFAULT_SPEC.insert_between("stream", "execute", StateSpec("approve"), _noop)
    DEFAULT_SPEC.replace_handler("check", _noop)
    DEFAULT_SPEC.with_guard("x", lambda ctx: True)
    DEFAULT_SPEC.replace_transition(T("fallback", "normalize"), T("fallback", "assemble"))
    assert (DEFAULT_SPEC.states, DEFAULT_SPEC.transitions, dict(DEFAULT_SPEC.handlers)) == before
    with pytest.raises(TypeError):
        DEFAULT_SPEC.handlers["check"] = _noop  # type: ignore[index]


def test_insert_between_reroutes_edges() -> None:
    """insert_between moves stream->execute to stream->approve and adds approve->execute."""
    spec = DEFAULT_SPEC.insert_between("stream", "execute", StateSpec("approve"), _noop)
    assert T("stream", "approve", "has_tool_calls") in spec.transitions_from("stream")
    assert spec.transitions_from("approve") == (T("approve", "execute"),)
    assert not [t for t in spec.transitions if t.key == ("stream", "execute", "has_tool_calls")]


def test_an_inserted_state_takes_the_edge_kind_from_its_target() -> None:
    """Inserted between check and a final state, a guardrail's incoming edge is no exit (it
    is not final): the exit moves to the edge from the guardrail into the final state."""
    spec = DEFAULT_SPEC.insert_between("check", "model_complete", StateSpec("guardrail"), _noop)
    into, out = spec.transitions_from("check")[4], spec.transitions_from("guardrail")
    assert (into.key, into.kind) == (("check", "guardrail", "model_finished"), "happy")
    assert [(t.key, t.kind) for t in out] == [(("guardrail", "model_complete", None), "exit")]
    recovery = DEFAULT_SPEC.insert_between("check", "repair", StateSpec("audit"), _noop)
    assert recovery.transitions_from("check")[3].kind == "recovery"
    assert recovery.transitions_from("audit")[0].kind == "recovery"


def test_add_transition_before_sets_priority() -> None:
    """``before`` places a new edge ahead of an existing one."""
    spec = DEFAULT_SPEC.with_guard("always", lambda ctx: True).add_transition(
        T("check", "model_complete", "always"), before=T("check", "abort", "abort_requested")
    )
    assert spec.transitions_from("check")[0] == T("check", "model_complete", "always")
    assert machine_at(spec, "check", HarnessState()).step() == "model_complete"


def test_custom_state_runs_like_a_builtin() -> None:
    """A host-defined state between execute and check runs its handler and its guards."""
    seen: list[int] = []

    async def audit(ctx: PhaseContext) -> None:
        seen.append(len(ctx.state.history))
        ctx.state.notes["audited"] = True

    spec = DEFAULT_SPEC.insert_between("execute", "check", StateSpec("audit"), audit).renamed(
        "audited"
    )

    async def echo(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        return ToolOutput("e")

    params = HarnessParams(
        model="scripted:m-20250101",
        tools=[ToolSpec("echo", "e", {"type": "object"}, echo)],
    )
    from innerloop import Harness

    provider = ScriptedProvider([reply(tool_call("echo", id="e1")), reply("done")])
    events: list[Any] = []
    state = Harness(params, [provider], machine=spec).run_sync("go", on_event=events.append)
    assert state.exit_reason == "model_complete"
    assert seen == [3]
    path = [(e.source, e.target) for e in events if e.type == "transition"]
    assert ("execute", "audit") in path
    assert ("audit", "check") in path


def test_replace_handler() -> None:
    """A replaced handler runs instead of the built-in one."""
    calls: list[str] = []

    async def my_check(ctx: PhaseContext) -> None:
        calls.append("check")
        ctx.state.outcome = Outcome.CHECKED

    spec = DEFAULT_SPEC.replace_handler("check", my_check)
    from innerloop import Harness

    params = HarnessParams(model="scripted:m-20250101")
    state = Harness(params, [ScriptedProvider([reply("hi")])], machine=spec).run_sync("go")
    assert state.exit_reason == "model_complete"
    assert calls == ["check"]


def _audit_spec(handler: Any) -> Any:
    return DEFAULT_SPEC.insert_between("execute", "check", StateSpec("audit"), handler)


def test_plain_def_handler_refused_naming_the_fix() -> None:
    """A sync handler fails at compile time (not with 'can't be used in await' mid-run)."""

    def audit(ctx: PhaseContext) -> None:
        return None

    with pytest.raises(SpecError) as info:
        compile_spec(_audit_spec(audit))
    assert info.value.rule == "handler-kind"
    assert str(info.value) == (
        "handler of state 'audit' (test_plain_def_handler_refused_naming_the_fix.<locals>."
        "audit) is a plain function; a phase handler is awaited: write it as 'async def "
        "audit(ctx)' (returning None or a list of events) or as an async generator "
        "yielding events"
    )
    with pytest.raises(SpecError, match=r"^handler of state 'audit' \(.*<lambda>\) is a plain"):
        compile_spec(_audit_spec(lambda ctx: None))


def test_handler_with_wrong_signature_refused() -> None:
    """A handler that cannot take the context alone is refused."""

    async def audit(ctx: PhaseContext, extra: int) -> None:
        return None

    with pytest.raises(SpecError) as info:
        compile_spec(_audit_spec(audit))
    assert info.value.rule == "handler-signature"
    assert "takes (ctx: 'PhaseContext', extra: 'int'); a phase handler takes one argument" in str(
        info.value
    )


def test_partial_and_callable_object_handlers_run() -> None:
    """functools.partial of an async function and an object whose __call__ is an async
    generator compile and run as handlers (the generator's events reach the host)."""
    from innerloop import Harness
    from innerloop._events import Alert

    seen: list[str] = []

    async def note(tag: str, ctx: PhaseContext) -> None:
        seen.append(tag)

    class Redact:
        async def __call__(self, ctx: PhaseContext) -> Any:
            yield Alert("audited", "checked")

    spec = (
        _audit_spec(functools.partial(note, "audit"))
        .insert_between("audit", "check", StateSpec("redact"), Redact())
        .renamed("audited_twice")
    )
    params = HarnessParams(model="scripted:m-20250101", tools=[_echo_tool()])
    provider = ScriptedProvider([reply(tool_call("echo", id="e1")), reply("done")])
    events: list[Any] = []
    state = Harness(params, [provider], machine=spec).run_sync("go", on_event=events.append)
    assert state.exit_reason == "model_complete"
    assert seen == ["audit"]
    assert [(e.kind, e.message) for e in events if e.type == "alert"] == [("audited", "checked")]


def _echo_tool() -> ToolSpec:
    async def echo(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        return ToolOutput("e")

    return ToolSpec("echo", "e", {"type": "object"}, echo)


@pytest.mark.parametrize(
    ("fn", "rule", "text"),
    [
        (
            lambda: True,
            "guard-signature",
            "guard 'looks_done' (<lambda>) takes (); a guard takes one argument, the "
            "PhaseContext: 'def looks_done(ctx: PhaseContext) -> bool' (read ctx.params and "
            "ctx.state)",
        ),
        (
            lambda ctx, call: True,
            "guard-signature",
            "guard 'looks_done' (<lambda>) takes (ctx, call); a guard takes one argument",
        ),
    ],
)
def test_guard_with_wrong_signature_refused(fn: Any, rule: str, text: str) -> None:
    """A guard must take exactly the context."""
    spec = DEFAULT_SPEC.with_guard("looks_done", fn)
    with pytest.raises(SpecError) as info:
        compile_spec(spec)
    assert info.value.rule == rule
    assert str(info.value).startswith(text)


def test_async_guard_refused() -> None:
    """An async guard would always hold (a coroutine is truthy): refused."""

    async def looks_done(ctx: PhaseContext) -> bool:
        return False

    with pytest.raises(SpecError) as info:
        compile_spec(DEFAULT_SPEC.with_guard("looks_done", looks_done))  # type: ignore[arg-type]
    assert info.value.rule == "guard-kind"
    assert "is async; a guard is a plain 'def looks_done(ctx) -> bool'" in str(info.value)


def test_misspelled_names_say_did_you_mean() -> None:
    """Every place a state, guard, edge or read is named suggests the close match."""
    cases: list[tuple[Any, str]] = [
        (
            lambda: compile_spec(
                DEFAULT_SPEC.add_transition(T("check", "asemble", "tasks_complete"))
            ),
            "transition check -> asemble [tasks_complete] refers to undeclared state 'asemble'; "
            "did you mean 'assemble'? Otherwise declare it with add_state()",
        ),
        (
            lambda: compile_spec(
                DEFAULT_SPEC.replace_transition(
                    T("assemble", "max_turns_exceeded", "turn_limit"),
                    T("assemble", "max_turns_exceeded", "turn_limt", "exit"),
                )
            ),
            "transition assemble -> max_turns_exceeded [turn_limt] names guard 'turn_limt', "
            "which resolves to nothing; did you mean 'turn_limit'? Otherwise add it with "
            "with_guard()",
        ),
        (
            lambda: compile_spec(attrs.evolve(DEFAULT_SPEC, initial="idel")),
            "initial state 'idel' is not declared; did you mean 'idle'?",
        ),
        (
            lambda: compile_spec(
                attrs.evolve(DEFAULT_SPEC, handlers={**DEFAULT_SPEC.handlers, "chek": _noop})
            ),
            "a handler is given for undeclared state 'chek'; did you mean 'check'?",
        ),
        (
            lambda: DEFAULT_SPEC.replace_handler("comapct", _noop),
            "spec 'innerloop' has no state 'comapct'; did you mean 'compact'?",
        ),
        (
            lambda: DEFAULT_SPEC.insert_between("stream", "exectue", StateSpec("x"), _noop),
            "spec 'innerloop' has no state 'exectue'; did you mean 'execute'?",
        ),
        (
            lambda: DEFAULT_SPEC.remove_transition(T("check", "asemble")),
            "spec 'innerloop' has no transition check -> asemble; did you mean 'check -> "
            "assemble'? (its edges from 'check' are listed by transitions_from('check'))",
        ),
        (
            lambda: compile_spec(
                DEFAULT_SPEC.with_guard("late", lambda ctx: True, reads=("state.tunrs",))
            ),
            "guard 'late' declares it reads 'state.tunrs', but HarnessState has no field "
            "'tunrs'; did you mean 'turns'?",
        ),
    ]
    for action, message in cases:
        with pytest.raises(SpecError) as info:
            action()
        assert str(info.value) == message


def test_a_spec_reads_short() -> None:
    """A spec's repr is one line (help(Harness) and inspect.signature show it as the
    default machine); a compiled machine's too."""
    import inspect

    from innerloop import Harness
    from innerloop.fsm import compile_spec

    fingerprint = DEFAULT_SPEC.fingerprint
    assert repr(DEFAULT_SPEC) == (
        f"MachineSpec('innerloop', 19 states, 45 transitions, fingerprint={fingerprint!r}, "
        "import_path='innerloop.fsm:DEFAULT_SPEC')"
    )
    assert repr(compile_spec(DEFAULT_SPEC)) == f"CompiledMachine({DEFAULT_SPEC!r})"
    assert len(str(inspect.signature(Harness))) < 1000
    edited = DEFAULT_SPEC.renamed("mine")
    assert edited.import_path is None
    assert edited.fingerprint == fingerprint  # the same machine under another name


def test_a_compiled_machine_keeps_nothing_alive_once_dropped() -> None:
    """python-statemachine registers machine classes process-wide by name; a compiled
    spec's class (holding its guards and what they close over) is taken out again."""
    import gc
    import weakref

    from innerloop.fsm import DEFAULT_SPEC, compile_spec

    class Held:
        pass

    held = Held()

    def never(ctx: PhaseContext, _held: Held = held) -> bool:
        return False

    spec = DEFAULT_SPEC.with_guard("turn_limit", never).renamed("holder")
    compiled = compile_spec(spec)
    assert compiled.select is not None
    ref = weakref.ref(held)
    del held, never, spec, compiled
    gc.collect()
    assert ref() is None


def test_machines_compiled_at_once_in_threads_leave_the_registry_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Threads compiling machines of one name each take theirs out of python-statemachine's
    registry: when another thread took the entry out between this one's look and its
    delete (driven here, not waited for), compiling still succeeds and nothing is left."""
    from statemachine import registry

    from innerloop.fsm import DEFAULT_SPEC, compile_spec

    class Racing(dict[str, Any]):
        """Another thread's unregister runs right after each look at an entry."""

        def get(self, key: str, default: Any = None) -> Any:
            found = super().get(key, default)
            self.pop(key, None)
            return found

        def __getitem__(self, key: str) -> Any:
            found = super().__getitem__(key)
            self.pop(key, None)
            return found

    racing = Racing()
    monkeypatch.setattr(registry, "_REGISTRY", racing)
    compiled = compile_spec(DEFAULT_SPEC.renamed("raced"))
    assert compiled.select is not None
    assert dict(racing) == {}
