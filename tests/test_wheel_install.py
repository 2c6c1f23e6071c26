"""The package as a user gets it: the sdist and the wheel built by the standard front-end
(``python -m build``, which builds the wheel from the sdist), both passing ``twine check``;
the wheel (not this checkout) installed with its ``testing`` extra into a fresh virtual
environment, and run from an empty folder: ``innerloop demo``, a small user project's own
test suite (``innerloop.testing`` and the coverage gate), and ``mypy --strict`` over it.

The fresh environment installs from a wheelhouse kept beside the running interpreter
(``<sys.prefix>/wheelhouse``): the first run fills it (``pip download``, about a minute),
later runs install from it with no index (some 30 seconds on a busy 2-core machine)."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

import attrs
import pytest

ROOT = Path(__file__).resolve().parent.parent
WHEELHOUSE = Path(sys.prefix) / "wheelhouse"

AGENT = '''\
"""A refunds agent: the default machine plus a way out to a person."""

from innerloop.fsm import DEFAULT_SPEC, MachineSpec, PhaseContext, StateSpec, TransitionSpec


def asks_for_a_person(ctx: PhaseContext) -> bool:
    last = ctx.state.last_response
    return last is not None and "ESCALATE" in last.message.text


SPEC: MachineSpec = (
    DEFAULT_SPEC.add_state(StateSpec("escalated", "final", "escalated", "a person takes over"))
    .with_guard("asks_for_a_person", asks_for_a_person)
    .add_transition(
        TransitionSpec("check", "escalated", "asks_for_a_person", "exit"),
        before=TransitionSpec("check", "model_complete", "model_finished", "exit"),
    )
    .renamed("refunds")
)
'''

TEST_AGENT = '''\
from innerloop import Harness, HarnessParams, HarnessState, Message, ModelResponse
from innerloop.testing import ScriptedProvider, Scenarios, TransitionCoverage, reply

from agent import SPEC


def escalating(params: HarnessParams, state: HarnessState) -> None:
    answer = Message.assistant("ESCALATE: refund over the limit")
    state.history = [Message.user("Refund order 4711"), answer]
    state.last_response = ModelResponse(answer, "end_turn")


SCENARIOS = Scenarios(SPEC).add("check", "escalated", escalating)


def test_a_refund_over_the_limit_escalates() -> None:
    ctx = SCENARIOS.context("check", "escalated")
    assert SCENARIOS.machine.select("check", ctx).target == "escalated"


async def test_a_run_escalates(transition_coverage: TransitionCoverage) -> None:
    harness = Harness(
        HarnessParams(model="scripted:scripted-20250101"),
        [ScriptedProvider([reply("ESCALATE: over the limit")])],
        machine=SPEC,
        observers=[transition_coverage],
    )
    state = await harness.run("Refund order 4711")
    assert state.exit_reason == "escalated"
'''

PYPROJECT = '''\
[tool.pytest.ini_options]
pythonpath = ["."]
addopts = """-p innerloop.testing.pytest_plugin --innerloop-coverage-strict
  --innerloop-coverage=agent:SPEC-innerloop.fsm:DEFAULT_SPEC"""
asyncio_mode = "auto"
asyncio_default_fixture_loop_scope = "function"
filterwarnings = ["error"]
'''


@attrs.frozen
class Installed:
    dist: Path
    """The folder holding the sdist and the wheel."""
    venv: Path
    home: Path
    """An empty folder to run the user's commands from."""

    def run(self, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        """``args`` from the fresh environment's bin/, with no path leading to the checkout."""
        env = _clean_env()
        env["PATH"] = f"{self.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        return subprocess.run(
            [str(self.venv / "bin" / args[0]), *args[1:]],
            cwd=cwd or self.home,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )


def _clean_env() -> dict[str, str]:
    """This environment without a path to the checkout (pip would take the checkout's
    innerloop for an installed one)."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


def _pip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
        capture_output=True,
        text=True,
        timeout=900,
        env=_clean_env(),
        cwd=tempfile.gettempdir(),
    )


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    base = tmp_path_factory.mktemp("wheel")
    dist, venv, home = base / "dist", base / "venv", base / "home"
    home.mkdir()
    built = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (wheel,) = dist.glob("*.whl")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    want = f"innerloop[testing] @ {wheel.as_uri()}"
    install = ("--python", str(venv / "bin" / "python"), "install", "--quiet", "--no-compile")
    local = _pip(*install, "--no-index", "--find-links", str(WHEELHOUSE), want)
    if local.returncode != 0:  # a first run, or a dependency the wheelhouse lacks
        fetched = _pip("download", "--quiet", "--dest", str(WHEELHOUSE), want)
        assert fetched.returncode == 0, fetched.stderr[-3000:]
        local = _pip(*install, "--no-index", "--find-links", str(WHEELHOUSE), want)
    assert local.returncode == 0, local.stderr[-3000:]
    return Installed(dist, venv, home)


def test_twine_checks_the_sdist_and_the_wheel(installed: Installed) -> None:
    files = sorted(p.name for p in installed.dist.iterdir())
    assert files == ["innerloop-0.1.0-py3-none-any.whl", "innerloop-0.1.0.tar.gz"]
    out = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *map(str, installed.dist.iterdir())],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("PASSED") == 2


def test_the_wheel_holds_every_file_of_the_package(installed: Installed) -> None:
    """Every file of innerloop/ under version control is in the wheel and the sdist: the
    live view's page and scripts, the tokenizer and price data, py.typed."""
    tracked = subprocess.run(
        ["git", "ls-files", "innerloop"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    assert any(f.startswith("innerloop/ui/static/") for f in tracked)
    (wheel,) = installed.dist.glob("*.whl")
    in_wheel = set(zipfile.ZipFile(wheel).namelist())
    assert [f for f in tracked if f not in in_wheel] == []
    (sdist,) = installed.dist.glob("*.tar.gz")
    with tarfile.open(sdist) as tar:
        in_sdist = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    assert [f for f in tracked if f not in in_sdist] == []


def test_the_installed_package_is_the_wheel(installed: Installed) -> None:
    out = installed.run("python", "-c", "import innerloop; print(innerloop.__file__)")
    assert out.returncode == 0, out.stderr
    assert Path(out.stdout.strip()).is_relative_to(installed.venv)


def test_the_demo_runs_from_an_empty_folder(installed: Installed) -> None:
    """`innerloop demo` writes its log, the nested run's log and the trace diagram."""
    demo = installed.home / "demo"
    demo.mkdir()
    out = installed.run("innerloop", "demo", cwd=demo)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    written = sorted(p.name for p in (demo / "runs" / "demo").iterdir())
    assert {"events.jsonl", "nested.jsonl", "trace.svg"} <= set(written)
    assert (demo / "runs" / "demo" / "trace.svg").read_text().lstrip().startswith("<?xml")


@pytest.fixture(scope="module")
def project(installed: Installed) -> Path:
    """A user's project in its own folder: a machine, its tests, its pytest settings."""
    folder = installed.home / "refunds"
    (folder / "tests").mkdir(parents=True)
    (folder / "agent.py").write_text(AGENT)
    (folder / "tests" / "test_agent.py").write_text(TEST_AGENT)
    (folder / "pyproject.toml").write_text(PYPROJECT)
    return folder


def test_a_user_projects_suite_passes_the_coverage_gate(
    installed: Installed, project: Path
) -> None:
    out = installed.run("python", "-m", "pytest", "-q", "-p", "no:cacheprovider", cwd=project)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "2 passed" in out.stdout
    assert (
        "transition coverage of 'refunds' (the transitions it adds over 'innerloop'):\n"
        "        2  check -> escalated [asks_for_a_person]\n"
        "1/1 transitions taken"
    ) in out.stdout


def test_a_user_project_type_checks_strictly(installed: Installed, project: Path) -> None:
    out = installed.run("python", "-m", "mypy", "--strict", "agent.py", "tests", cwd=project)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert out.stdout.startswith("Success: no issues found in 2 source files")
