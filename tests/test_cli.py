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
    *args: str, env: dict[str, str] | None = None, timeout: float = 120, cwd: Path = ROOT
) -> subprocess.CompletedProcess[str]:
    """``innerloop ARGS`` in a real process run from ``cwd``, with no API key in its
    environment but those of ``env``."""
    base = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    base["PYTHONPATH"] = str(ROOT)
    base.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "innerloop", *args],
        capture_output=True,
        text=True,
        env=base,
        timeout=timeout,
        cwd=cwd,
    )


PHASES = {
    "assemble", "compact", "normalize", "call", "stream", "execute", "check", "backoff",
    "fallback", "abort", "repair",
}  # fmt: skip


def test_demo_runs_offline_and_shows_every_recovery_branch(tmp_path: Path) -> None:
    """The demo drives the real SDKs over loopback HTTP through every recovery branch, then
    a second run the host aborts mid-stream, a third with typed output repaired once and a
    nested one (sub-agents, an approval that suspends the whole run, a typed handoff), in
    under a minute: all eleven phases show on the screen and in the event log, the trace
    diagram is written, and the nested run is approved, resumed and written to its own log."""
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
    finished = [e["exit_reason"] for e in events if e["type"] == "finished"]
    assert finished == ["model_complete", "aborted", "model_complete"]
    assert events[-1]["type"] == "finished"
    ends = [i for i, e in enumerate(events) if e["type"] == "finished"]
    second, third = events[ends[0] + 1 : ends[1] + 1], events[ends[1] + 1 :]
    assert [(e["source"], e["target"]) for e in second if e["type"] == "transition"][-2:] == [
        ("stream", "abort"),
        ("abort", "aborted"),
    ]
    assert sum(e["type"] == "text_delta" for e in second) >= 5
    assert {e["target"] for e in events if e["type"] == "transition"} >= PHASES
    shown = {line.split("->")[1].split()[0] for line in proc.stdout.splitlines() if " -> " in line}
    assert shown >= PHASES
    assert "second run: exit_reason=aborted (host abort: mid-stream, after 5 text deltas)" in (
        proc.stdout
    )
    assert [(e["source"], e["target"]) for e in third if e["type"] == "transition"][4:7] == [
        ("stream", "check"),
        ("check", "repair"),
        ("repair", "assemble"),
    ]
    assert [a["message"] for a in third if a["type"] == "alert"] == [
        "repair 1 of 2: the answer does not match output_type Report: missing required "
        "field 'sum_b'"
    ]
    assert (
        "third run: exit_reason=model_complete output=Report(city='Lisbon', sum_a=5, sum_b=42) "
        "repairs=1"
    ) in proc.stdout
    svg = (tmp_path / "trace.svg").read_text()
    assert svg.startswith("<?xml")
    assert "fallback" in svg
    nested = read_event_log(tmp_path / "nested.jsonl")
    assert [e["exit_reason"] for e in nested if e["type"] == "finished"] == [
        "suspended",
        "model_complete",
    ]
    assert (
        "approval asked by scout#2: buy_report({'title': 'EHPA market report 2025'}); the "
        "whole run is suspended; the host answers True (harness.resume(run, answer=True))"
    ) in proc.stdout
    assert (
        "fourth run: exit_reason=model_complete output=Brief(title='European heat pumps in "
        "2024', findings=['Sales fell 21% in 2024.', 'Poland fell most: -40%.'], "
        "sources=['IEA 2024', 'EHPA market report 2025'])"
    ) in proc.stdout
    assert "  rolled up to the research agent: 90 tokens, cost=$0.000198" in proc.stdout
    # console lines stay short: a resumed run says where it goes on from, not its state
    assert max(map(len, proc.stdout.splitlines())) < 240
    assert (
        "  * run_started: machine='research' from 'survey' (resumed after 3 turns, 45 tokens, "
        "$0.000013)\n"
    ) in proc.stdout
    assert (
        "  * finished: exit_reason='suspended' after 3 turns, 45 tokens, $0.000013, waits on "
        "approval from 'scout#2'\n"
    ) in proc.stdout


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


def test_a_local_openai_compatible_server_needs_no_key() -> None:
    """`run --provider openai --base-url URL` without OPENAI_API_KEY runs (a local server
    needs no key, as OpenAIProvider(base_url=...) does not); Anthropic still asks for one."""
    from innerloop.testing import OpenAIServer, reply

    with OpenAIServer([reply("Hello from a keyless server.")]) as server:
        proc = cli("run", "Say hello", "--provider", "openai", "--base-url", server.base_url,
                   "--no-live")  # fmt: skip
        assert len(server.requests) == 1
    assert proc.returncode == 0, proc.stderr
    assert "exit_reason=model_complete turns=1" in proc.stdout
    anthropic = cli("run", "Say hello", "--base-url", server.base_url)
    assert anthropic.returncode == 2
    assert "ANTHROPIC_API_KEY is not set" in anthropic.stderr


def test_local_and_base_url_exclude_each_other() -> None:
    """`run --local` serves its own model: with --base-url too it is a usage error."""
    proc = cli("run", "x", "--local", "--base-url", "http://127.0.0.1:9/v1")
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "innerloop run: error: --local serves its own model: drop --base-url, or drop "
        "--local to use the server at --base-url"
    )


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
    assert events[-1]["type"] == "finished"
    assert events[-1]["exit_reason"] == "aborted"


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


def _fails(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run the command line in-process; it must fail with exit 2 and one stderr line."""
    from innerloop.cli import main

    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "Traceback" not in err
    return err.strip()


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("http://[::1", " (Invalid IPv6 URL)"),
        ("http://localhost:99999", " (Port out of range 0-65535)"),
        ("localhost:8080", "; give http(s)://HOST[:PORT][/PATH]"),
        ("ftp://example.test", "; give http(s)://HOST[:PORT][/PATH]"),
    ],
)
def test_bad_base_url(
    url: str, problem: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A malformed --base-url is one line naming the option, exit 2 (was a traceback)."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    err = _fails(["run", "x", "--base-url", url, "--no-live"], capsys)
    assert err == f"innerloop run: error: --base-url: {url!r} is not a valid URL{problem}"


PRICE_SHAPE = (
    "entry 'm' must be an object with input, output and optionally cache_read, cache_write "
    "(US dollars per million tokens)"
)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (
            "[1, 2]",
            'must hold a JSON object {"model-prefix": {"input": 3.0, "output": 15.0}, ...}, '
            "got a JSON list",
        ),
        ('{"m": 3.0}', PRICE_SHAPE),
        ('{"m": {"input": 1}}', PRICE_SHAPE),
        (
            '{"m": {"input": NaN, "output": 1}}',
            "entry 'm': price.input: must be a finite number >= 0, got nan",
        ),
        (
            '{"m": {"input": "3", "output": 1}}',
            "entry 'm': price.input: must be a finite number >= 0, got '3'",
        ),
    ],
)
def test_bad_prices_file(
    content: str,
    problem: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A --prices file that is not an object of prices is one line naming the option."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    prices = tmp_path / "prices.json"
    prices.write_text(content)
    err = _fails(["run", "x", "--prices", str(prices), "--no-live"], capsys)
    problem = problem if problem.startswith("entry") else f"{prices} {problem}"
    assert err == f"innerloop run: error: --prices: {problem}"


def test_prices_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--prices naming a directory says it cannot be read."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    err = _fails(["run", "x", "--prices", str(tmp_path), "--no-live"], capsys)
    assert err == f"innerloop run: error: --prices: cannot read {tmp_path}: Is a directory"


def test_log_not_writable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--log naming a directory, a path under a file or an unwritable place is one line
    naming the option and the problem, exit 2, before anything is sent (was a traceback)."""
    from innerloop.testing import AnthropicServer, reply

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    (tmp_path / "file").write_text("")
    if os.geteuid() == 0:  # root writes anywhere but in sysfs
        unwritable = Path("/sys/innerloop-run.jsonl")
    else:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        unwritable = locked / "run.jsonl"
    cases = {
        tmp_path: "Is a directory",
        tmp_path / "file" / "run.jsonl": f"{tmp_path / 'file'} is not a directory",
        unwritable: "Permission denied",
    }
    with AnthropicServer([reply("never sent")] * 3) as server:
        for log, problem in cases.items():
            args = ["run", "x", "--base-url", server.base_url, "--log", str(log), "--no-live"]
            err = _fails(args, capsys)
            assert err == f"innerloop run: error: --log: cannot write {log}: {problem}"
        assert server.requests == []


def _gone(pid: int) -> bool:
    """The process has exited (a zombie awaiting its reaper counts as exited)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def _pid_of(*argv: str) -> int:
    """The host pid of the process whose command line is ``argv``, or 0."""
    wanted = "\0".join(argv) + "\0"
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "cmdline").read_text() == wanted:
                    return int(entry.name)
            except OSError:
                continue
    return 0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_abort_like_sigint(sig: signal.Signals, tmp_path: Path) -> None:
    """SIGTERM or SIGHUP during a shell tool's `sleep 60`: exit 4, the log ends with
    `finished` (aborted, the signal named), and the sleep process is killed."""
    from innerloop.testing import AnthropicServer, reply, tool_call

    log = tmp_path / "run.jsonl"
    marker = f"60.{os.getpid()}{int(sig)}"  # a unique argument: the shell may run in its own
    command = f"echo started > sleep.pid; exec sleep {marker}"  # PID namespace (bubblewrap)
    script = [reply(tool_call("run_shell", {"command": command}, id="s1")), reply("never")]
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update({"PYTHONPATH": str(ROOT), "ANTHROPIC_API_KEY": "sk-ant-test"})
    pid_file = tmp_path / "sleep.pid"
    with AnthropicServer(script) as server:
        proc = subprocess.Popen(
            [sys.executable, "-m", "innerloop", "run", "sleep", "--base-url", server.base_url,
             "--tools", "shell", "--workspace", str(tmp_path), "--log", str(log), "--no-live"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=ROOT,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        pid = 0
        while time.monotonic() < deadline and proc.poll() is None:
            pid = _pid_of("sleep", marker) if pid_file.exists() else 0
            if pid:
                break
            time.sleep(0.05)
        assert pid, "the shell tool never started sleep"
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 4, out + err
    assert "Traceback" not in err
    events = read_event_log(log)
    assert any(e["type"] == "abort" and e["reason"] == f"interrupted ({sig.name})" for e in events)
    assert events[-1]["type"] == "finished"
    assert events[-1]["exit_reason"] == "aborted"
    deadline = time.monotonic() + 10
    while not _gone(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(pid)


def test_signal_during_startup_is_one_line(tmp_path: Path) -> None:
    """SIGTERM while start-up blocks (reading --system from a FIFO): one line, exit 4."""
    fifo = tmp_path / "system.fifo"
    os.mkfifo(fifo)
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update({"PYTHONPATH": str(ROOT), "ANTHROPIC_API_KEY": "sk-ant-test"})
    proc = subprocess.Popen(
        [sys.executable, "-m", "innerloop", "run", "x", "--system", str(fifo), "--no-live"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    deadline = time.monotonic() + 60
    writer = -1
    while writer < 0 and time.monotonic() < deadline and proc.poll() is None:
        try:  # succeeds once the command line has opened the FIFO to read it
            writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            time.sleep(0.05)
    assert writer >= 0, "the command line never opened --system"
    try:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        os.close(writer)
    assert proc.returncode == 4, out + err
    assert err == "innerloop run: interrupted by SIGTERM\n"
