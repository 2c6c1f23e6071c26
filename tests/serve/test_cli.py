"""``innerloop serve``: a harness named on the command line, served until Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import openai
import pytest

from innerloop.cli import main

ROOT = Path(__file__).resolve().parents[2]


def _env() -> dict[str, str]:
    return os.environ | {"PYTHONPATH": str(ROOT)}


def test_serve_runs_the_named_harness_until_ctrl_c() -> None:
    """The printed URL answers the openai SDK; SIGINT stops the server, status 0."""
    command = [
        sys.executable,
        "-m",
        "innerloop",
        "serve",
        "tests.serve.agents:weather_agent",
        "--port",
        "0",
    ]
    with subprocess.Popen(
        command, cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as server:
        try:
            assert server.stdout is not None
            first = server.stdout.readline()
            assert first.startswith("innerloop serve: http://127.0.0.1:"), first
            base = first.split()[2]
            with openai.OpenAI(api_key="x", base_url=base, max_retries=0) as c:
                done = c.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "Weather?"}]
                )
            assert done.choices[0].message.content == "Sunny in Lisbon."
        finally:
            server.send_signal(signal.SIGINT)
            _, err = server.communicate(timeout=30)
    assert server.returncode == 0, err


@pytest.mark.parametrize(
    ("target", "says"),
    [
        ("nowhere", "innerloop serve expects MODULE:ATTR"),
        ("tests.serve.agents:missing", "cannot load the harness tests.serve.agents:missing"),
        ("tests.serve.agents:NOT_A_HARNESS", "expected a Harness, got int"),
    ],
)
def test_a_target_that_is_no_harness_is_a_usage_error(
    target: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit status 2 and one line naming the fix."""
    assert main(["serve", target]) == 2
    assert says in capsys.readouterr().err
