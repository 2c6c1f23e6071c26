"""The coverage plugin reports the machines a suite names (and no other), and its strict
mode fails a session that left a tracked transition untaken. Each case runs pytest on a
small sample user project in a subprocess."""

from __future__ import annotations

import pytest

from innerloop.examples import CostCap, with_cost_cap, with_guardrail
from innerloop.fsm import DEFAULT_SPEC
from innerloop.testing import TransitionCoverage

pytest_plugins = ["pytester"]


@pytest.fixture(autouse=True)
def _project_settings(pytester: pytest.Pytester) -> None:
    """The sample project's pytest settings: async tests as the testing guide shows them."""
    pytester.makeini(
        "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n"
    )


INNER = """
from innerloop import Harness, HarnessParams
from innerloop.examples import CostCap, with_cost_cap, with_guardrail
from innerloop.testing import ScriptedProvider, reply

def test_one_run(transition_coverage):
    spec = with_guardrail()
    transition_coverage.track(spec)
    harness = Harness(
        HarnessParams(model="scripted:m-20250101"),
        [ScriptedProvider([reply("hi")])],
        machine=spec,
        observers=[transition_coverage],
    )
    assert harness.run_sync("go").exit_reason == "model_complete"
"""


def test_a_tracked_custom_machine_gets_its_table(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(INNER)
    result = pytester.runpytest("-p", "innerloop.testing.pytest_plugin")
    result.assert_outcomes(passed=1)
    out = result.stdout.str()
    guardrail = out[out.index("transition coverage of 'guardrail':") :]
    assert "        1  check -> model_complete [model_finished]" in guardrail
    assert "!!      0  redact -> abort [abort_requested]" in guardrail


def test_strict_mode_fails_on_a_custom_machines_untaken_transition(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(INNER)
    result = pytester.runpytest(
        "-p", "innerloop.testing.pytest_plugin", "--innerloop-coverage-strict"
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert "guardrail: redact -> abort [abort_requested]" in result.stdout.str()


def test_an_untracked_machine_is_named(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(INNER.replace("    transition_coverage.track(spec)\n", ""))
    result = pytester.runpytest("-p", "innerloop.testing.pytest_plugin")
    assert (
        "machine 'guardrail' took transitions but is not tracked: name it with "
        "--innerloop-coverage=MODULE:ATTR or call transition_coverage.track(spec)"
    ) in result.stdout.str()


def test_two_machines_with_one_name_are_refused() -> None:
    """Two machines with one name could not be reported apart: the second is refused."""
    coverage = TransitionCoverage()
    coverage.track(with_guardrail())
    with pytest.raises(ValueError, match="both named 'guardrail'"):
        coverage.track(
            with_cost_cap(CostCap(max_tokens=10), lambda s, st: True).renamed("guardrail")
        )


# -- a sample user project: a custom machine in a module, tests that take some edges ------

REFUNDS = """
from innerloop.fsm import DEFAULT_SPEC, StateSpec, TransitionSpec

def asks_for_a_person(ctx):
    last = ctx.state.last_response
    return last is not None and "ESCALATE" in last.message.text

SPEC = (
    DEFAULT_SPEC.add_state(StateSpec("escalated", "final", "escalated", "a person takes over"))
    .with_guard("asks_for_a_person", asks_for_a_person)
    .add_transition(
        TransitionSpec("check", "escalated", "asks_for_a_person", "exit"),
        before=TransitionSpec("check", "model_complete", "model_finished", "exit"),
    )
    .renamed("escalation")
)

def escalation():
    return SPEC
"""

ESCALATING = """
def escalating(params, state):
    answer = Message.assistant("ESCALATE: refund over the limit")
    state.history = [Message.user("Refund order 4711"), answer]
    state.last_response = ModelResponse(answer, "end_turn")

SCENARIOS = Scenarios(SPEC).add("check", "escalated", escalating)
"""

TEST_REFUNDS = """
from innerloop import Message, ModelResponse
from innerloop.testing import Scenarios, machine_at
from refunds import SPEC
""" + ESCALATING + """
def test_escalates(transition_coverage):
    ctx = SCENARIOS.context("check", "escalated")
    probe = machine_at(SPEC, "check", ctx.state, ctx.params, observers=[transition_coverage])
    assert probe.step() == "escalated"

def test_answers(transition_coverage):
    ctx = SCENARIOS.context("check", "model_complete")
    probe = machine_at(SPEC, "check", ctx.state, ctx.params, observers=[transition_coverage])
    assert probe.step() == "model_complete"
"""

PLUGIN = ("-p", "innerloop.testing.pytest_plugin")
STRICT = "--innerloop-coverage-strict"


@pytest.fixture
def refunds(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(refunds=REFUNDS, test_refunds=TEST_REFUNDS)
    pytester.syspathinsert()  # as a project's pythonpath setting does
    return pytester


class TestSampleProject:
    def test_nothing_is_gated_without_options(self, refunds: pytest.Pytester) -> None:
        """No machine named: strict mode passes, says it gates nothing, and names the
        machine that ran untracked; the default machine is not reported."""
        result = refunds.runpytest(*PLUGIN, STRICT)
        result.assert_outcomes(passed=2)
        assert result.ret == pytest.ExitCode.OK
        out = result.stdout.str()
        assert "transition coverage of" not in out
        assert (
            "--innerloop-coverage-strict gates nothing: no machine is tracked "
            "(name one with --innerloop-coverage)"
        ) in out
        assert "machine 'escalation' took transitions but is not tracked" in out

    def test_a_named_machine_is_gated_whole(self, refunds: pytest.Pytester) -> None:
        """--innerloop-coverage=refunds:SPEC gates every edge of the machine: the session
        fails naming the untaken ones, not the two taken."""
        result = refunds.runpytest(*PLUGIN, "--innerloop-coverage=refunds:SPEC", STRICT)
        result.assert_outcomes(passed=2)
        assert result.ret == pytest.ExitCode.TESTS_FAILED
        out = result.stdout.str()
        assert "transition coverage of 'escalation':\n!!      0  idle -> assemble\n" in out
        assert "        2  check -> escalated [asks_for_a_person]\n" in out  # scenario, step
        assert "2/46 transitions taken" in out
        failed = out[out.index("FAILED: transitions never taken: ") :]
        assert failed.startswith(
            "FAILED: transitions never taken: escalation: idle -> assemble; "
            "escalation: assemble -> abort [abort_requested]; "
        )
        assert "check -> escalated" not in failed
        assert "check -> model_complete" not in failed

    def test_only_the_added_edges_are_gated(self, refunds: pytest.Pytester) -> None:
        """SPEC-BASE gates only the edges SPEC adds over the default machine: taken, the
        session passes though most default edges are not."""
        result = refunds.runpytest(
            *PLUGIN, "--innerloop-coverage=refunds:SPEC-innerloop.fsm:DEFAULT_SPEC", STRICT
        )
        result.assert_outcomes(passed=2)
        assert result.ret == pytest.ExitCode.OK
        out = result.stdout.str()
        assert (
            "transition coverage of 'escalation' (the transitions it adds over 'innerloop'):\n"
            "        2  check -> escalated [asks_for_a_person]\n"
            "1/1 transitions taken\n"
        ) in out
        assert "FAILED" not in out

    def test_an_untaken_added_edge_fails(self, refunds: pytest.Pytester) -> None:
        """The same gate, with the escalating test deselected: the added edge is named."""
        result = refunds.runpytest(
            *PLUGIN,
            "--innerloop-coverage=refunds:escalation-innerloop.fsm:DEFAULT_SPEC",
            STRICT,
            "-k",
            "answers",
        )
        result.assert_outcomes(passed=1, deselected=1)
        assert result.ret == pytest.ExitCode.TESTS_FAILED
        assert (
            "FAILED: transitions never taken: escalation: check -> escalated [asks_for_a_person]"
        ) in result.stdout.str()

    def test_track_added_over_from_a_fixture(self, refunds: pytest.Pytester) -> None:
        """transition_coverage.track(SPEC, added_over=DEFAULT_SPEC) in a conftest is the
        same gate as the option."""
        refunds.makeconftest(
            """
import pytest
from innerloop.fsm import DEFAULT_SPEC
from refunds import SPEC

@pytest.fixture(autouse=True, scope="session")
def _gate(transition_coverage):
    transition_coverage.track(SPEC, added_over=DEFAULT_SPEC)
"""
        )
        result = refunds.runpytest(*PLUGIN, STRICT)
        assert result.ret == pytest.ExitCode.OK
        assert "1/1 transitions taken" in result.stdout.str()

    def test_a_derived_machines_runs_count_for_its_base(self, refunds: pytest.Pytester) -> None:
        """Edges are counted by (source, target, guard): the escalation machine's run
        covers the default machine's check -> model_complete."""
        result = refunds.runpytest(*PLUGIN, "--innerloop-coverage=innerloop.fsm:DEFAULT_SPEC")
        out = result.stdout.str()
        assert "transition coverage of 'innerloop':" in out
        assert "        2  check -> model_complete [model_finished]\n" in out
        assert "1/45 transitions taken" in out
        assert "not tracked" not in out

    @pytest.mark.parametrize(
        ("reference", "message"),
        [
            ("refunds", "--innerloop-coverage: 'refunds' is not MODULE:ATTR; name a machine"),
            ("refunds:NOPE", "--innerloop-coverage: 'refunds' has no attribute 'NOPE'"),
            ("refunds:SPEC-", "--innerloop-coverage: '' is not MODULE:ATTR; name a machine"),
            ("nowhere:SPEC", "--innerloop-coverage: cannot import 'nowhere' (No module named"),
            (
                "refunds:asks_for_a_person",
                "--innerloop-coverage: refunds:asks_for_a_person is a function that takes "
                "arguments (missing a required argument: 'ctx'); name a machine",
            ),
            (
                "refunds:DEFAULT_SPEC.name",
                "--innerloop-coverage: refunds:DEFAULT_SPEC.name is a str, not a MachineSpec",
            ),
        ],
    )
    def test_a_bad_reference_is_a_usage_error(
        self, refunds: pytest.Pytester, reference: str, message: str
    ) -> None:
        """Each wrong reference stops pytest before any test, saying what is wrong."""
        result = refunds.runpytest(*PLUGIN, f"--innerloop-coverage={reference}")
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        assert message in result.stderr.str()


TEST_NO_CEREMONY = """
import pytest
from innerloop import Message, ModelResponse
from innerloop.testing import Scenarios, machine_at
from refunds import SPEC
""" + ESCALATING + """
@pytest.mark.innerloop_coverage
def test_escalates():
    SCENARIOS.context("check", "escalated")

def test_answers():
    ctx = SCENARIOS.context("check", "model_complete")
    assert machine_at(SPEC, "check", ctx.state, ctx.params).step() == "model_complete"
"""

ADDED = "--innerloop-coverage=refunds:SPEC-innerloop.fsm:DEFAULT_SPEC"


@pytest.fixture
def scoped(pytester: pytest.Pytester) -> pytest.Pytester:
    """The refunds project with scenario tests that never name the fixture, and a replay
    test file that takes no transition."""
    pytester.makepyfile(
        refunds=REFUNDS,
        test_machine=TEST_NO_CEREMONY,
        test_replay="def test_replays():\n    assert True\n",
    )
    pytester.syspathinsert()
    return pytester


class TestNoCeremonyAndScope:
    def test_scenarios_and_probes_count_without_the_fixture(
        self, scoped: pytest.Pytester
    ) -> None:
        """A scenario built and a probe stepped count, though no test passes an observer."""
        result = scoped.runpytest(
            *PLUGIN, "--innerloop-coverage=innerloop.fsm:DEFAULT_SPEC", ADDED, STRICT
        )
        result.assert_outcomes(passed=3)
        out = result.stdout.str()
        assert "        1  check -> escalated [asks_for_a_person]\n1/1 transitions taken" in out
        assert "        2  check -> model_complete [model_finished]\n" in out

    def test_an_unscoped_gate_fails_a_file_about_something_else(
        self, scoped: pytest.Pytester
    ) -> None:
        """Without a scope, running the replay file alone fails the gate (0/1)."""
        result = scoped.runpytest(*PLUGIN, ADDED, STRICT, "test_replay.py")
        assert result.ret == pytest.ExitCode.TESTS_FAILED
        assert "0/1 transitions taken" in result.stdout.str()

    def test_a_session_without_a_test_in_scope_is_not_gated(
        self, scoped: pytest.Pytester
    ) -> None:
        result = scoped.runpytest(
            *PLUGIN, ADDED, STRICT, "--innerloop-coverage-scope=test_machine.py", "test_replay.py"
        )
        result.assert_outcomes(passed=1)
        assert result.ret == pytest.ExitCode.OK
        assert (
            "--innerloop-coverage-strict gates nothing this session: no test in "
            "--innerloop-coverage-scope ran"
        ) in result.stdout.str()

    def test_the_files_in_scope_are_gated(self, scoped: pytest.Pytester) -> None:
        result = scoped.runpytest(*PLUGIN, ADDED, STRICT, "--innerloop-coverage-scope=*machine*")
        result.assert_outcomes(passed=3)
        assert result.ret == pytest.ExitCode.OK
        assert "1/1 transitions taken" in result.stdout.str()

    def test_tests_out_of_scope_count_nothing(self, scoped: pytest.Pytester) -> None:
        """Scoped to the replay file, the machine file's scenarios do not count."""
        result = scoped.runpytest(
            *PLUGIN, ADDED, STRICT, "--innerloop-coverage-scope=test_replay.py"
        )
        result.assert_outcomes(passed=3)
        assert result.ret == pytest.ExitCode.TESTS_FAILED
        assert "0/1 transitions taken" in result.stdout.str()

    def test_marked_tests_only(self, scoped: pytest.Pytester) -> None:
        """Scoped to marked tests: the marked escalation counts, the unmarked answer not."""
        result = scoped.runpytest(
            *PLUGIN,
            "--innerloop-coverage=innerloop.fsm:DEFAULT_SPEC",
            ADDED,
            "--innerloop-coverage-scope=marked",
        )
        result.assert_outcomes(passed=3)
        out = result.stdout.str()
        assert "        1  check -> escalated [asks_for_a_person]\n" in out
        assert "!!      0  check -> model_complete [model_finished]\n" in out


class TestTracking:
    def test_tracking_again_adds_to_what_is_reported(self) -> None:
        """Added edges first, then the whole machine: the whole machine is reported."""
        coverage = TransitionCoverage()
        spec = with_guardrail()
        coverage.track(spec, added_over=DEFAULT_SPEC)
        added = coverage.tracked["guardrail"]
        assert ([str(t) for t in added.edges], added.base) == (
            ["execute -> redact", "redact -> abort [abort_requested]", "redact -> check"],
            "innerloop",
        )
        coverage.track(spec)
        assert (coverage.tracked["guardrail"].edges, coverage.tracked["guardrail"].base) == (
            spec.transitions,
            None,
        )

    def test_counts_are_pooled_by_edge_key(self) -> None:
        """A transition counts for every machine with that edge, whatever its name."""
        coverage = TransitionCoverage()
        coverage.track(DEFAULT_SPEC)
        edge = DEFAULT_SPEC.transitions[0]
        coverage.on_transition("guardrail", edge)
        coverage.on_transition("innerloop", edge)
        assert coverage.count(edge) == 2
        assert edge not in coverage.missing(coverage.tracked["innerloop"])
        assert coverage.untracked() == []
