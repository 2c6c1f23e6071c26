"""``innerloop replay --db URL RUN_ID``: a stored run replayed through the real command
line, in a subprocess, its params from ``--harness``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from innerloop import Harness
from innerloop.providers import AnthropicProvider
from innerloop.testing import AnthropicServer, FakeClock, Fault, reply, tool_call
from tests.testing.replay_store import PARAMS

ROOT = Path(__file__).resolve().parents[2]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.run(
        [sys.executable, "-m", "innerloop", "replay", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A store holding run ``r1``: a 429, a tool call, an answer, over the Anthropic SDK
    on the loopback server, checkpointed at every transition."""
    url = f"sqlite:///{tmp_path_factory.mktemp('store') / 'runs.db'}"
    script = [
        Fault.rate_limited(retry_after=1),
        reply("Adding.", tool_call("add", {"a": 2, "b": 3}, id="toolu_1")),
        reply("5."),
    ]
    with AnthropicServer(script) as server:
        provider = AnthropicProvider("sk-ant-api03-cli-0123456789abcdef", base_url=server.base_url)
        harness = Harness(PARAMS, [provider], checkpointer=url, clock=FakeClock())
        state = harness.start("2 + 3?", run_id="r1").run_sync()
        assert harness.checkpointer is not None
        harness.checkpointer.close()
    assert state.exit_reason == "model_complete"
    return url


def test_a_stored_run_replays_with_its_harness(store: str) -> None:
    done = cli("--db", store, "r1", "--harness", "tests.testing.replay_store:harness")
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == (
        f"OK run r1 of {store}: 14 transitions, 3 model calls, exit_reason=model_complete\n"
    )


def test_last_names_the_most_recent_stored_run(store: str) -> None:
    done = cli("--db", store, "last", "--harness", "tests.testing.replay_store:harness")
    assert done.returncode == 0
    assert done.stdout.startswith(f"OK run r1 of {store}: ")


def test_another_harness_prints_the_divergence_and_exits_1(store: str) -> None:
    """Params with a turn limit of one: the path parts where the limit fires."""
    done = cli("--db", store, "r1", "--harness", "tests.testing.replay_store:other")
    assert (done.returncode, done.stderr) == (1, "")
    assert done.stdout == (
        f"DIVERGED run r1 of {store}: transition 9 in state 'check'\n"
        "  recorded: check -> assemble\n"
        "  replayed: check -> max_turns_exceeded [turn_limit_continuing]\n"
    )


def test_without_a_harness_the_error_names_the_fix(store: str) -> None:
    done = cli("--db", store, "r1")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        f"innerloop replay: cannot replay run r1 of {store}: a checkpoint store keeps no "
        "params; pass --harness MODULE:ATTR naming the Harness the run ran on (or a function "
        "of no argument returning one), or replay the run's event log instead\n"
    )


def test_a_harness_that_cannot_be_imported_exits_2(store: str) -> None:
    done = cli("--db", store, "r1", "--harness", "tests.testing.replay_store:nowhere")
    assert done.returncode == 2
    assert done.stderr.startswith("innerloop replay: --harness: ")
    assert "nowhere" in done.stderr


def test_no_such_stored_run_exits_2(store: str) -> None:
    done = cli("--db", store, "r9", "--harness", "tests.testing.replay_store:harness")
    assert done.returncode == 2
    assert done.stderr == (
        f"innerloop replay: cannot replay run r9 of {store}: no run 'r9' in the checkpoint "
        "store; `innerloop runs list --db URL` (or harness.runs()) lists the runs it holds\n"
    )
