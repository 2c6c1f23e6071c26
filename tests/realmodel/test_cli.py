"""The command line against a real server: `run --base-url` with no key, and `run --local`,
which serves the bundled model itself and stops it when the run ends."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

from innerloop.local import LocalModelServer
from tests.test_cli import cli as innerloop_cli

SHORT = "Reply with one word: hello."
# the command line samples at the server's temperature: the answer may run past the cap
# and continue, so a run is held to two turns and may end complete (0) or at that limit (3)
BOUNDED = ("--max-output-tokens", "32", "--max-turns", "2", "--no-live")
ANSWERED = re.compile(r"model turn 1 \(openai:(\S+)\): stop_reason=\w+ (['\"]).*\2")
"""The console's line for the model's first turn: its model id and its text's repr."""


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``innerloop ARGS`` in a subprocess, with no API key in its environment."""
    return innerloop_cli(*args, timeout=600)


def test_run_against_a_local_server_needs_no_key(llama_server: LocalModelServer) -> None:
    """`run --provider openai --base-url` the real server, without OPENAI_API_KEY: the
    model answers and the run ends (no usage error)."""
    proc = cli("run", SHORT, "--provider", "openai", "--base-url", llama_server.base_url,
               *BOUNDED)  # fmt: skip
    assert proc.returncode in (0, 3), proc.stderr
    assert ANSWERED.search(proc.stdout), proc.stdout


def test_run_local_serves_the_bundled_model_and_stops_it() -> None:
    """`run --local` starts llama.cpp with the bundled SmolLM2 itself, streams its answer,
    prices it at zero, and stops the server (by its pid) when the run ends."""
    proc = cli("run", "--local", SHORT, *BOUNDED)
    found = re.search(r"server pid (\d+)", proc.stderr)
    assert found, proc.stderr
    pid = int(found.group(1))
    try:
        assert proc.returncode in (0, 3), proc.stderr
        answered = ANSWERED.search(proc.stdout)
        assert answered, proc.stdout
        assert answered.group(1) == "SmolLM2-135M-Instruct.Q4_1"
        assert "cost=$0.000000" in proc.stdout
        assert not _running(pid), "the server outlived the run"
    finally:
        if _running(pid):
            os.kill(pid, signal.SIGKILL)


def test_run_local_names_a_missing_model_file(tmp_path: Path) -> None:
    """`run --local --model FILE` serves that GGUF file; a missing one is a usage error
    (exit 2, one line), and no server is left behind."""
    proc = cli("run", "--local", "--model", str(tmp_path / "nope.gguf"), SHORT)
    assert proc.returncode == 2
    assert f"innerloop run: error: --local: no GGUF file at {tmp_path / 'nope.gguf'}" in (
        proc.stderr
    )
    assert "Traceback" not in proc.stderr


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
