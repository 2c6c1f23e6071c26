"""A run knows its machine: resume and fork check the harness against what the run
recorded, on custom machines (the approval and cost-cap examples), on every store."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from innerloop import Harness, HarnessParams, ResumeError, tool
from innerloop.examples import CostCap, with_approval, with_cost_cap
from innerloop.fsm import (
    DEFAULT_SPEC,
    MachineNotFound,
    MachineRecord,
    StateSpec,
    TransitionSpec,
    find_machine,
    load_spec,
)
from innerloop.testing import ScriptedProvider, assert_valid_history, reply, tool_call

MODEL = "anthropic:claude-sonnet-4-5-20250929"
NO_MODEL = ScriptedProvider([], name="anthropic")
"""For harnesses whose runs are refused before any model call."""


@tool(category="file")
async def delete_file(path: str) -> str:
    """Delete a file."""
    return f"deleted {path}"


@pytest.fixture
def make_harness(make_harness: Any) -> Iterator[Any]:
    """The suite's ``make_harness``, with every store it opened closed at the end."""
    made: list[Harness] = []

    def make(*args: Any, **kwargs: Any) -> Harness:
        harness: Harness = make_harness(*args, **kwargs)
        made.append(harness)
        return harness

    yield make
    for harness in made:
        if harness.checkpointer is not None:
            harness.checkpointer.close()


def params(*tools: Any) -> HarnessParams:
    return HarnessParams(model=MODEL, tools=list(tools))


def suspended_approval_run(db_url: str, make_harness: Any) -> Harness:
    """A run of the approval machine, suspended before ``delete_file`` runs, as ``r1``."""
    model = ScriptedProvider(
        [reply(tool_call("delete_file", {"path": "build.log"}, id="c1"))], name="anthropic"
    )
    harness: Harness = make_harness(
        params(delete_file), model, machine=with_approval(), checkpointer=db_url
    )
    assert harness.start("Remove build.log", run_id="r1").run_sync().exit_reason == "suspended"
    return harness


def cost_cap() -> Any:
    return with_cost_cap(CostCap(max_cost_usd=1.0), lambda spending, state: True)


def test_a_run_records_its_machine(db_url: str, make_harness: Any) -> None:
    """The store keeps the machine's name, fingerprint and import path per run."""
    harness = suspended_approval_run(db_url, make_harness)
    (info,) = harness.runs()
    spec = with_approval()
    assert (info.machine, info.fingerprint, info.import_path) == (
        "approval",
        spec.fingerprint,
        "innerloop.examples:with_approval",
    )
    record = harness.checkpointer.machine("r1")  # type: ignore[union-attr]
    assert record == MachineRecord.of(spec)
    assert record is not None
    assert record.signature == spec.signature()


def test_resume_on_another_machine_is_refused(db_url: str, make_harness: Any) -> None:
    """A harness on the default machine cannot go on with an approval run: the error names
    the machine the run needs and where to import it; nothing is written."""
    suspended_approval_run(db_url, make_harness)
    other = make_harness(params(delete_file), NO_MODEL, checkpointer=db_url)
    before = other.checkpoints("r1")
    with pytest.raises(ResumeError) as err:
        other.resume("r1", answer=True)
    assert str(err.value) == (
        f"run 'r1': it ran on machine 'approval' (fingerprint {with_approval().fingerprint}, "
        "import path innerloop.examples:with_approval), and this harness runs machine "
        f"'innerloop' (fingerprint {DEFAULT_SPEC.fingerprint}, import path "
        "innerloop.fsm:DEFAULT_SPEC); build the Harness with "
        "machine=innerloop.examples:with_approval (it names that spec)"
    )
    with pytest.raises(ResumeError, match="it ran on machine 'approval'"):
        other.fork("r1", answer=True)
    assert other.checkpoints("r1") == before
    assert [r.run_id for r in other.runs()] == ["r1"]  # the fork created no run


def test_same_name_missing_parts_are_named(db_url: str, make_harness: Any) -> None:
    """A machine named like the run's but without what the run used: each missing state,
    edge and handler is named."""
    suspended_approval_run(db_url, make_harness)
    impostor = DEFAULT_SPEC.renamed("approval")
    other = make_harness(params(delete_file), NO_MODEL, machine=impostor, checkpointer=db_url)
    with pytest.raises(ResumeError) as err:
        other.resume("r1", answer=True)
    message = str(err.value)
    assert "this harness's machine 'approval'" in message
    assert "lacks what it used: state 'approve'; transition stream -> approve [has_tool_calls]" in (
        message
    )
    assert (
        "handler of state 'execute' (innerloop.examples.approval:execute_approved; this "
        "machine has innerloop.fsm._phases:execute)"
    ) in message


def test_params_lacking_a_called_tool_are_refused(db_url: str, make_harness: Any) -> None:
    """The right machine with params that lack a tool the history calls: refused before
    the approved call could get "unknown tool"."""
    suspended_approval_run(db_url, make_harness)
    other = make_harness(params(), NO_MODEL, machine=with_approval(), checkpointer=db_url)
    with pytest.raises(ResumeError) as err:
        other.resume("r1", answer=True)
    assert str(err.value) == (
        "run 'r1': its history calls tool 'delete_file', which the params lack; build the "
        "params with the tools the run used (a model is refused a history that calls "
        "undeclared tools)"
    )
    with pytest.raises(ResumeError, match="tool 'delete_file'"):
        other.fork("r1", answer=True)


def test_the_right_harness_goes_on(db_url: str, make_harness: Any) -> None:
    """The same machine (a callback of its own: same structure) and tools resume it; so
    does a newer version of the machine that keeps everything the run used."""
    suspended_approval_run(db_url, make_harness)
    newer = (
        with_approval(lambda call, state: True)
        .add_state(StateSpec("escalated", "final", "escalated"))
        .with_guard("never", lambda ctx: False)
        .add_transition(TransitionSpec("check", "escalated", "never", "exit"))
        .renamed("approval")
    )
    for machine, run_id in ((with_approval(), "r1"), (newer, None)):
        harness = make_harness(
            params(delete_file),
            ScriptedProvider([reply("done")], name="anthropic"),
            machine=machine,
            checkpointer=db_url,
        )
        if run_id is None:  # a fork of the suspended checkpoint, listed by checkpoints()
            (at,) = [c.seq for c in harness.checkpoints("r1") if c.state == "suspended"]
            run = harness.fork("r1", at=at, answer=True)
        else:
            run = harness.resume(run_id, answer=True)
        state = run.run_sync()
        assert state.exit_reason == "model_complete"
        assert state.history[2].tool_results[0].content == "deleted build.log"
        assert_valid_history(state.history)


def test_in_memory_resume_checks_the_machine(make_harness: Any) -> None:
    """Without a store: a suspended Run of another machine, or its state, is refused."""
    model = ScriptedProvider(
        [reply(tool_call("delete_file", {"path": "x"}, id="c1"))], name="anthropic"
    )
    approval = make_harness(params(delete_file), model, machine=with_approval())
    run = approval.start("go")
    assert run.run_sync().exit_reason == "suspended"
    plain = make_harness(params(delete_file), NO_MODEL)
    with pytest.raises(ResumeError, match=r"^it ran on machine 'approval'"):
        plain.resume(run, answer=True)
    with pytest.raises(ResumeError) as err:
        plain.resume(run.state, answer=True)
    assert str(err.value) == (
        "it stopped in state 'approve', which machine 'innerloop' does not have; build the "
        "Harness with the machine the run used"
    )


def test_cost_cap_run_on_the_approval_machine(db_url: str, make_harness: Any) -> None:
    """A second custom machine: a cost-cap run stopped mid-way cannot go on with an
    approval harness; the error says the spec has no import path to name."""
    model = ScriptedProvider([reply("hello")], name="anthropic")
    harness = make_harness(params(), model, machine=cost_cap(), checkpointer=db_url)
    harness.start("hi", run_id="c1")  # never run: its first checkpoint (idle) is stored
    other = make_harness(params(), NO_MODEL, machine=with_approval(), checkpointer=db_url)
    with pytest.raises(ResumeError) as err:
        other.resume("c1")
    assert str(err.value).endswith("build the Harness with machine= the spec named 'costcap'")
    assert f"it ran on machine 'costcap' (fingerprint {cost_cap().fingerprint})" in str(err.value)


class TestFindMachine:
    """Finding a run's machine from its record, for the tools that draw runs."""

    def test_an_import_path_is_named_never_followed(self) -> None:
        """A record is data: the spec at its import path is named as the one to pass."""
        spec = with_approval()
        with pytest.raises(MachineNotFound) as err:
            find_machine(MachineRecord.of(spec), what="run 1")
        assert str(err.value) == (
            f"run 1 ran on machine 'approval' (fingerprint {spec.fingerprint}), which is not "
            "at hand; it was made by the spec at innerloop.examples:with_approval (a file is "
            "data: that path is not imported); pass --spec innerloop.examples:with_approval "
            "naming that spec"
        )
        assert find_machine(MachineRecord.of(spec), [spec]) is spec

    def test_by_spec_given(self) -> None:
        spec = cost_cap()
        assert find_machine(MachineRecord.of(spec), [DEFAULT_SPEC, spec]) is spec

    def test_default(self) -> None:
        assert find_machine(MachineRecord.of(DEFAULT_SPEC.renamed("innerloop"))) is DEFAULT_SPEC

    def test_not_at_hand(self) -> None:
        spec = cost_cap()
        with pytest.raises(MachineNotFound) as err:
            find_machine(MachineRecord.of(spec), [DEFAULT_SPEC], what="run log:x:1")
        assert str(err.value) == (
            f"run log:x:1 ran on machine 'costcap' (fingerprint {spec.fingerprint}), which "
            f"is not at hand; the --spec given: 'innerloop' ({DEFAULT_SPEC.fingerprint}); "
            "pass --spec MODULE:ATTR naming that spec"
        )

    def test_a_hint_that_is_not_an_import_path_is_not_shown(self) -> None:
        """A recorded import path that is not ``module:attr`` (a newline, a shell line) is
        shown quoted in the record, and the error says MODULE:ATTR: one line."""
        record = MachineRecord("x", "0" * 16, "os:system\nrm -rf /")
        with pytest.raises(MachineNotFound) as err:
            find_machine(record)
        assert "\n" not in str(err.value)
        assert str(err.value).endswith("; pass --spec MODULE:ATTR naming that spec")
        assert str(record) == (
            "machine 'x' (fingerprint 0000000000000000, import path 'os:system\\nrm -rf /')"
        )

    def test_unrecorded(self) -> None:
        assert find_machine(None) is DEFAULT_SPEC
        assert find_machine(None, [cost_cap()]).name == "costcap"
        with pytest.raises(MachineNotFound, match="recorded no machine"):
            find_machine(None, [cost_cap(), with_approval()])

    def test_load_spec(self) -> None:
        spec = load_spec("innerloop.examples:with_approval")
        assert spec.import_path == "innerloop.examples:with_approval"
        assert load_spec("innerloop.fsm:DEFAULT_SPEC") is DEFAULT_SPEC
        with pytest.raises(ValueError, match="is a function that needs arguments"):
            load_spec("innerloop.examples:with_cost_cap")
        with pytest.raises(ValueError, match=r"^builtins:input: expected a MachineSpec or "):
            load_spec("builtins:input")  # a builtin is never called
        with pytest.raises(ValueError, match=r"^cannot load the machine nosuch:X: No module"):
            load_spec("nosuch:X")
