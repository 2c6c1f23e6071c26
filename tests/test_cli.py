"""The command line as a subprocess: demo, errors, exit codes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from innerloop._eventlog import read_event_log

ROOT = Path(__file__).resolve().parents[1]


def cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    base["PYTHONPATH"] = str(ROOT)
    base.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "innerloop", *args],
        capture_output=True,
        text=True,
        env=base,
        timeout=timeout,
        cwd=ROOT,
    )


def test_demo_runs_offline_and_writes_its_log(tmp_path: Path) -> None:
    """The demo finishes with exit 0 and a log that records its recovery branches."""
    proc = cli("demo", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "exit_reason=model_complete" in proc.stdout
    events = read_event_log(tmp_path / "events.jsonl")
    kinds = {e["type"] for e in events}
    assert {"backoff", "compacted", "tool_executed", "finished"} <= kinds
    edges = {(e["source"], e["target"]) for e in events if e["type"] == "transition"}
    assert ("call", "backoff") in edges and ("call", "call") in edges
    assert ("stream", "compact") in edges
    assert events[-1]["type"] == "finished" and events[-1]["exit_reason"] == "model_complete"


@pytest.mark.parametrize(
    ("provider", "var"), [("anthropic", "ANTHROPIC_API_KEY"), ("openai", "OPENAI_API_KEY")]
)
def test_missing_key_names_the_variable(provider: str, var: str) -> None:
    """No key: exit 2 and a one-line error naming the variable, no traceback."""
    proc = cli("run", "hello", "--provider", provider)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f"innerloop run: error: {var} is not set: export {var}=... to use the {provider} provider"
    )
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "x", "--max-turns", "0"], "argument --max-turns: must be >= 1, got 0"),
        (["run", "x", "--max-cost", "abc"], "argument --max-cost: expected a number, got 'abc'"),
        (
            ["run", "x", "--fallback", "gemini:x"],
            "argument --fallback: expected provider:model with provider anthropic or openai, "
            "got 'gemini:x'",
        ),
        (["run", "x", "--provider", "bard"], "argument --provider: invalid choice: 'bard'"),
        (["frobnicate"], "argument command: invalid choice: 'frobnicate'"),
    ],
)
def test_bad_options(args: list[str], message: str) -> None:
    """Bad options: exit 2 with argparse's message naming the option."""
    proc = cli(*args)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


def test_bad_params_combination_is_a_usage_error(tmp_path: Path) -> None:
    """A params error (context budget below max output) is reported as a usage error."""
    proc = cli(
        "run",
        "x",
        "--context-budget",
        "100",
        "--max-output-tokens",
        "200",
        env={"ANTHROPIC_API_KEY": "sk-ant-test"},
    )
    assert proc.returncode == 2
    assert "context_budget: must exceed max_output_tokens (200), got 100" in proc.stderr


def test_missing_system_file(tmp_path: Path) -> None:
    """--system naming a missing file says so."""
    proc = cli(
        "run", "x", "--system", str(tmp_path / "nope.txt"), env={"ANTHROPIC_API_KEY": "sk-ant-test"}
    )
    assert proc.returncode == 2
    assert f"--system: cannot read {tmp_path / 'nope.txt'}" in proc.stderr
