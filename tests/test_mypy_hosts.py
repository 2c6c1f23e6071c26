"""Host programs type-check under ``mypy --strict`` outside the repo, against the project
installed editable (``pip install -e``, as ``make`` installs it): the manual's examples and
small typed hosts, in a temporary directory, with a fresh virtual environment whose only
innerloop is this tree's editable install (the other packages come from this interpreter's
site-packages through a path entry)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.docs._pages import python_blocks, skipped

ROOT = Path(__file__).resolve().parents[1]

TYPED_PAGES = [
    "README.md",
    "docs/getting-started.md",
    "docs/concepts/bounded-loops.md",
    "docs/event-log.md",
    "docs/tools.md",
    "docs/guides/conversations.md",
    "docs/guides/custom-states.md",
    "docs/guides/diagrams.md",
    "docs/guides/embed.md",
    "docs/guides/live-view.md",
    "docs/guides/mcp.md",
    "docs/guides/pause-resume-fork.md",
    "docs/guides/providers.md",
    "docs/guides/sandbox.md",
    "docs/guides/testing.md",
    "docs/guides/tracing.md",
    "docs/guides/typed-output.md",
]
"""The pages whose runnable examples (every ```python block not fenced
``{test="skip"}``) must pass ``mypy --strict`` as user code."""

HOST = '''\
"""A newcomer's host: the event loop, a typed answer, the test helpers."""

import asyncio

from pydantic import BaseModel
from typing_extensions import assert_type

from innerloop import Harness, HarnessParams, HarnessState, tool
from innerloop.events import Finished, RunEvent, TextDelta, ToolExecuted, Transition
from innerloop.testing import FakeClock, ScriptedProvider, reply, tool_call


class Weather(BaseModel):
    city: str
    celsius: float


@tool(category="network")
async def weather(city: str) -> str:
    """Current weather for a city."""
    return f"sunny in {city}"


def show(event: RunEvent) -> None:
    match event:
        case TextDelta(text=text):
            print(text, end="")
        case ToolExecuted(name=name, output=output):
            print(f"[{name}: {output}]")
        case Transition(source=source, target=target):
            print(source, "->", target)
        case Finished(exit_reason=reason, usage=usage):
            print(reason, usage.output_tokens)
        case _:
            pass


async def main() -> None:
    script = [reply(tool_call("weather", {"city": "Lisbon"})), reply("Sunny.")]
    params = HarnessParams(model="scripted:m", tools=[weather])
    async for event in Harness(params, [ScriptedProvider(script)]).start("Lisbon?").events():
        show(event)


def typed() -> float:
    params = HarnessParams(model="scripted:m", output_type=Weather)
    model = ScriptedProvider([reply('{"city": "Lisbon", "celsius": 21.5}')])
    state = Harness(params, [model], clock=FakeClock()).run_sync("Lisbon?")
    assert_type(state, HarnessState[Weather])
    return state.output.celsius if state.output is not None else float("nan")


asyncio.run(main())
print(typed())
'''

WRONG = """\
from pydantic import BaseModel

from innerloop import Harness, HarnessParams
from innerloop.testing import ScriptedProvider, reply


class Weather(BaseModel):
    city: str


params = HarnessParams(model="scripted:m", output_type=Weather)
state = Harness(params, [ScriptedProvider([reply("{}")])]).run_sync("?")
print(state.output.city)
"""
"""A deliberate type error: the answer may be None (so the check can fail)."""


def checked_snippets() -> dict[str, str]:
    """The examples mypy checks, by the file each is written to (named after its page
    and line)."""
    found = {}
    for example in python_blocks():
        page = example.path.relative_to(ROOT).as_posix()
        if page in TYPED_PAGES and not skipped(example):
            name = re.sub(r"\W", "_", example.path.relative_to(ROOT).with_suffix("").as_posix())
            found[f"{name}_{example.start_line}.py"] = example.source
    return found


def _output(python: Path, code: str) -> str:
    """What ``code`` prints, run by ``python`` outside the repo."""
    done = subprocess.run(
        [python, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=python.parent,
        env=_environ(),
    )
    return done.stdout.strip()


def _purelib(python: Path) -> Path:
    return Path(_output(python, "import sysconfig; print(sysconfig.get_paths()['purelib'])"))


def _environ() -> dict[str, str]:
    """This environment without the paths that would make the tree importable another way."""
    drop = {"PYTHONPATH", "MYPYPATH", "PYTHONHOME", "VIRTUAL_ENV"}
    return {k: v for k, v in os.environ.items() if k not in drop}


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new virtual environment with this tree installed editable (no dependencies: those
    come from this interpreter's site-packages, a path entry without its .pth files, so
    the shared install of innerloop there is not seen)."""
    where = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", where], check=True)
    python = where / "bin" / "python"
    here = sysconfig.get_paths()["purelib"]
    (_purelib(python) / "dependencies.pth").write_text(here + "\n")
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet"]
    subprocess.run(
        [*pip, "--no-deps", "-e", str(ROOT)],
        check=True,
        capture_output=True,
        env=_environ(),
    )
    return python


@pytest.fixture(scope="module")
def report(venv: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """``mypy --strict`` once over the host programs and the manual's examples, in a
    directory outside the repo: its error lines by file."""
    where = tmp_path_factory.mktemp("hosts")
    files = {"host.py": HOST, "wrong.py": WRONG, **checked_snippets()}
    for name, code in files.items():
        (where / name).write_text(code)
    done = subprocess.run(
        [venv, "-m", "mypy", "--strict", "--cache-dir", where / "cache", *sorted(files)],
        cwd=where,
        capture_output=True,
        text=True,
        env=_environ(),
    )
    found: dict[str, list[str]] = {name: [] for name in files}
    for line in done.stdout.splitlines():
        name, _, rest = line.partition(":")
        if name in found and ": error:" in line:
            found[name].append(rest)
    assert done.returncode in (0, 1), done.stdout + done.stderr
    return found


def test_the_install_is_this_tree(venv: Path) -> None:
    """The environment imports innerloop from this tree, through a plain path entry (a
    .pth line, which mypy follows), not an import hook."""
    imported = _output(
        venv, "import innerloop.events, innerloop.testing; print(innerloop.__file__)"
    )
    assert Path(imported) == ROOT / "innerloop" / "__init__.py"
    entries = [p.read_text().strip() for p in _purelib(venv).glob("__editable__*.pth")]
    assert [Path(e).resolve() for e in entries] == [ROOT]


def test_a_typed_host_passes_outside_the_repo(report: dict[str, list[str]]) -> None:
    """mypy finds innerloop, innerloop.testing and innerloop.events through the editable
    install, and the host program (an event loop, a typed answer) passes ``--strict``."""
    assert report["host.py"] == []


def test_a_type_error_is_reported(report: dict[str, list[str]]) -> None:
    """The check can fail: reading the answer without a None check is an error, since
    the answer is a ``Weather | None`` (and not ``Any``)."""
    assert report["wrong.py"] == [
        '13: error: Item "None" of "Weather | None" has no attribute "city"  [union-attr]'
    ]


def test_the_manual_examples_pass_mypy_strict(report: dict[str, list[str]]) -> None:
    """Every runnable example of the typed pages type-checks under ``--strict``."""
    snippets = checked_snippets()
    failing = {name: errors for name, errors in report.items() if name in snippets and errors}
    assert failing == {}, failing


def test_the_event_loop_and_typed_output_examples_are_checked() -> None:
    """The examples this check is for are among those checked, and every typed page
    exists (a renamed one would otherwise be left out)."""
    checked = "\n".join(checked_snippets().values())
    assert "match event:" in checked
    assert checked.count("output_type=Weather") == 2
    assert all((ROOT / page).is_file() for page in TYPED_PAGES)
