"""The command line as a subprocess: demo, errors, exit codes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
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


def test_demo_runs_offline_and_shows_every_recovery_branch(tmp_path: Path) -> None:
    """The demo drives the real SDKs over loopback HTTP through every recovery branch, in
    under a minute, and writes its event log and trace diagram."""
    started = time.monotonic()
    proc = cli("demo", "--out", str(tmp_path), env={"NO_COLOR": "1"})
    assert time.monotonic() - started < 60
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert "exit_reason=model_complete" in proc.stdout
    assert "backoff waits are scaled by 0.01" in proc.stdout
    events = read_event_log(tmp_path / "events.jsonl")
    backoffs = [e for e in events if e["type"] == "backoff"]
    assert [b["retry_after"] is not None for b in backoffs] == [True, True, True, False, False]
    (fallback,) = [e for e in events if e["type"] == "fallback"]
    assert (fallback["from_provider"], fallback["to_provider"]) == ("anthropic", "openai")
    edges = [(e["source"], e["target"], e["guard"]) for e in events if e["type"] == "transition"]
    assert ("call", "call", "transient_retry") in edges
    assert ("stream", "compact", "truncated") in edges
    compacted = [e for e in events if e["type"] == "compacted"]
    assert [c["reason"] for c in compacted] == ["max_tokens"]
    tools = [e for e in events if e["type"] == "tool_executed"]
    assert [t["name"] for t in tools[:2]] == ["add", "add"]  # the parallel pair
    assert sum(t["is_error"] for t in tools if t["name"] == "weather") == 3
    assert any(t["timed_out"] for t in tools)
    alerts = [e for e in events if e["type"] == "alert"]
    assert any(a["kind"] == "tool_failing" for a in alerts)
    assert events[-1]["type"] == "finished" and events[-1]["exit_reason"] == "model_complete"
    svg = (tmp_path / "trace.svg").read_text()
    assert svg.startswith("<?xml") and "fallback" in svg


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


def test_run_against_loopback_server(tmp_path: Path) -> None:
    """`run` talks to an Anthropic-compatible server through --base-url and logs the run."""
    from innerloop.testing import AnthropicServer, reply

    log = tmp_path / "run.jsonl"
    with AnthropicServer([reply("Hello from the loopback server.")]) as server:
        proc = cli(
            "run",
            "Say hello",
            "--base-url",
            server.base_url,
            "--log",
            str(log),
            "--no-live",
            env={"ANTHROPIC_API_KEY": "sk-ant-test-key-123456"},
        )
        sent = server.requests[0]
    assert proc.returncode == 0, proc.stderr
    assert "exit_reason=model_complete turns=1" in proc.stdout
    assert "sk-ant-test-key-123456" in (
        sent.headers.get("x-api-key", "") + sent.headers.get("authorization", "")
    )
    assert sent.body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Say hello"}]}
    ]
    events = read_event_log(log)
    assert events[-1]["exit_reason"] == "model_complete"
    assert "sk-ant-test-key" not in log.read_text()


def test_exit_code_for_a_limit(tmp_path: Path) -> None:
    """A run stopped by --max-turns exits with code 3."""
    from innerloop.testing import AnthropicServer, reply, tool_call

    script = [reply(tool_call("missing_tool", id=f"t{i}")) for i in range(3)]
    with AnthropicServer(script) as server:
        proc = cli(
            "run",
            "loop",
            "--base-url",
            server.base_url,
            "--max-turns",
            "2",
            "--no-live",
            env={"ANTHROPIC_API_KEY": "sk-ant-test"},
        )
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "exit_reason=max_turns_exceeded" in proc.stdout


def test_sigint_aborts_cleanly(tmp_path: Path) -> None:
    """Ctrl-C mid-stream: exit code 4, exit reason aborted, the log complete and flushed."""
    from innerloop.testing import AnthropicServer, SlowReply, reply

    log = tmp_path / "run.jsonl"
    slow = SlowReply(reply("word " * 400), tokens_per_second=20)
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update({"PYTHONPATH": str(ROOT), "ANTHROPIC_API_KEY": "sk-ant-test"})
    with AnthropicServer([slow]) as server:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "innerloop",
                "run",
                "write",
                "--base-url",
                server.base_url,
                "--log",
                str(log),
                "--no-live",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=ROOT,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if log.exists() and '"text_delta"' in log.read_text():
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 4, out + err
    assert "Traceback" not in err
    events = read_event_log(log)
    assert any(e["type"] == "abort" and "SIGINT" in e["reason"] for e in events)
    assert events[-1]["type"] == "finished" and events[-1]["exit_reason"] == "aborted"


def test_run_with_builtin_tools(tmp_path: Path) -> None:
    """--tools offers the named built-in sets, confined to --workspace."""
    from innerloop.testing import AnthropicServer, reply, tool_call

    (tmp_path / "notes.txt").write_text("hello")
    script = [
        reply(tool_call("read_file", {"path": "notes.txt"}, id="r1")),
        reply("It says hello."),
    ]
    with AnthropicServer(script) as server:
        proc = cli(
            "run",
            "read my notes",
            "--base-url",
            server.base_url,
            "--no-live",
            "--tools",
            "files,tasks",
            "--workspace",
            str(tmp_path),
            env={"ANTHROPIC_API_KEY": "sk-ant-test"},
        )
        offered = [t["name"] for t in server.requests[0].body["tools"]]
        result = server.requests[1].body["messages"][-1]["content"][0]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert offered == ["read_file", "write_file", "edit_file", "list_dir", "search", "tasks"]
    assert (result["tool_use_id"], result["content"]) == ("r1", "hello")


def test_unknown_tool_set() -> None:
    """An unknown --tools set is a usage error listing the sets."""
    proc = cli("run", "x", "--tools", "nope", env={"ANTHROPIC_API_KEY": "sk-ant-test"})
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "innerloop run: error: --tools: unknown built-in tool set 'nope'; "
        "choose from files, shell, python, tasks"
    )
