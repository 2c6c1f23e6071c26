"""The concurrency bench runs end to end at a small scale (its figures are the bench's to
report, not a timed test's)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("transport", ["wire", "sdk"])
def test_concurrency_bench_smoke(transport: str) -> None:
    """20 loops through the loopback server: every loop completes, and the report holds
    the figures the manual quotes."""
    argv = [sys.executable, str(ROOT / "bench" / "concurrency.py"), "--loops", "20"]
    argv += ["--transport", transport, "--gc", "off", "--chunk-interval", "0.005"]
    argv += ["--tool-seconds", "0.05", "--arrival-rate", "200"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, check=True)
    report = json.loads(done.stdout[: done.stdout.rindex("}") + 1])
    assert report["exit_reasons"] == ["model_complete"]
    assert (report["loops"], report["transport"], report["model_turns_per_loop"]) == (
        20,
        transport,
        4,
    )
    assert report["ticks"] > 0
    assert report["longest_stall_ms"] >= report["p99_stall_ms"] >= 0
    assert report["idle_rss_per_loop_kb"] < 1024
    assert "targets (stall <= 50 ms, < 1 MB per idle loop):" in done.stdout
