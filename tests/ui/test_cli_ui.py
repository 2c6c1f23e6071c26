"""``innerloop ui`` and ``--ui`` on the command line: real processes, real sockets."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import httpx
import pytest

from innerloop.cli import main
from innerloop.testing import AnthropicServer, SlowReply, reply

ROOT = Path(__file__).resolve().parents[2]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update({"PYTHONPATH": str(ROOT), "ANTHROPIC_API_KEY": "sk-ant-test", "NO_COLOR": "1"})
    return env


@pytest.fixture
def spawn() -> Iterator[object]:
    """Start ``python -m innerloop ARGS``; any process still alive at the end is killed."""
    procs: list[subprocess.Popen[str]] = []

    def start(*args: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "innerloop", *args],
            cwd=ROOT,
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def _line_with(stream: IO[str] | None, marker: str) -> str:
    assert stream is not None
    seen = []
    for line in stream:
        seen.append(line)
        if marker in line:
            return line
    raise AssertionError(f"no line with {marker!r} in {''.join(seen)!r}")


def _url(line: str) -> str:
    return next(word for word in line.split() if word.startswith("http://"))


class TestBadInput:
    def test_without_the_ui_extra_it_names_the_extra(self, tmp_path: Path) -> None:
        """No starlette: `innerloop ui` (and --ui) say what to install, exit 2."""
        code = (
            "import sys; sys.modules['starlette'] = None\n"
            "from innerloop.cli import main; sys.exit(main(['ui', '--port', '0']))"
        )
        done = subprocess.run(
            [sys.executable, "-c", code],
            cwd=tmp_path,
            env=_env(),
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        assert (done.returncode, done.stdout) == (2, "")
        assert done.stderr == (
            "innerloop ui: error: the live view needs starlette: pip install 'innerloop[ui]'\n"
        )

    @pytest.mark.parametrize(
        ("args", "message"),
        [
            (
                ["--db", "bogus://x"],
                "--db: unknown checkpoint store URL 'bogus://x'; use sqlite:///path/runs.db, "
                "postgresql://user@host/db or memory:",
            ),
            (
                ["--db", "sqlite:///no/such.db"],
                "--db: no SQLite file 'no/such.db' (a store is created by a run's --db)",
            ),
            (["--runs", "no/such/folder"], "--runs: no folder 'no/such/folder'"),
            (["--port", "70000"], None),
        ],
    )
    def test_one_line_and_exit_2(
        self, args: list[str], message: str | None, capsys: pytest.CaptureFixture[str]
    ) -> None:
        with pytest.raises(SystemExit) if message is None else contextlib.nullcontext():
            code = main(["ui", *args])
            assert code == 2
        err = capsys.readouterr().err
        if message is None:  # argparse's own usage error
            assert "a port is 0 to 65535 (0: a free one), got 70000" in err
        else:
            assert err == f"innerloop ui: error: {message}\n"

    def test_an_unreachable_postgres_is_one_line(self, capsys: pytest.CaptureFixture[str]) -> None:
        with socket.socket() as s:  # a port nobody listens on
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        assert main(["ui", "--db", f"postgresql://nobody@127.0.0.1:{port}/x"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("innerloop ui: error: --db: ")
        assert err.count("\n") == 1

    def test_a_taken_port_is_one_line(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            s.listen()
            port = s.getsockname()[1]
            assert main(["ui", "--runs", str(tmp_path), "--port", str(port)]) == 2
        assert capsys.readouterr().err == (
            f"innerloop ui: error: the live view cannot listen on 127.0.0.1:{port}: Address "
            "already in use; pick another port (0: a free one) or host\n"
        )


def test_ui_serves_until_ctrl_c(tmp_path: Path, spawn: object) -> None:
    """It prints its URL on 127.0.0.1, serves the folder's runs, and Ctrl-C ends it with 0."""
    (tmp_path / "a.jsonl").write_text('{"type": "log_header", "schema": "innerloop.events/1"}\n')
    proc = spawn("ui", "--runs", str(tmp_path), "--port", "0")  # type: ignore[operator]
    url = _url(_line_with(proc.stdout, "innerloop ui: "))
    assert url.startswith("http://127.0.0.1:")
    runs = httpx.get(url + "api/runs", timeout=10).json()["runs"]
    assert [(r["id"], r["status"]) for r in runs] == [("log:a.jsonl:1", "running")]
    proc.send_signal(signal.SIGINT)
    assert proc.wait(10) == 0


def test_run_ui_serves_the_run_in_progress_then_waits(spawn: object) -> None:
    """``run --ui --ui-wait``: the URL is printed before the run, the page shows it running,
    then finished; the process serves on until Ctrl-C and exits with the run's code."""
    slow = SlowReply(reply("A slow answer, one word at a time, " * 3), tokens_per_second=10)
    with AnthropicServer([slow]) as server:
        proc = spawn(  # type: ignore[operator]
            "run",
            "hi",
            "--base-url",
            server.base_url,
            "--no-live",
            "--ui",
            "--ui-port",
            "0",
            "--ui-wait",
        )
        line = _line_with(proc.stdout, "live view: ")
        url = _url(line)
        assert "?run=log:run.jsonl:last" in url
        api = url.split("?")[0] + "api/run/log:run.jsonl:last"
        detail = httpx.get(api, timeout=10)
        assert detail.status_code in (200, 404)  # 404 until the log's first line
        _line_with(proc.stdout, "serving until Ctrl-C")
        detail = httpx.get(api, timeout=10).json()
        assert (detail["status"], detail["exit_reason"]) == ("finished", "model_complete")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(10) == 0


def test_demo_ui_prints_the_url_and_stops_with_the_demo(tmp_path: Path, spawn: object) -> None:
    """Without --ui-wait the server ends with the command."""
    proc = spawn(  # type: ignore[operator]
        "demo", "--out", str(tmp_path), "--no-live", "--ui", "--ui-port", "0"
    )
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    (line,) = [x for x in out.splitlines() if x.startswith("live view: ")]
    assert "/?run=log:events.jsonl:last" in line
    with pytest.raises(httpx.ConnectError):
        httpx.get(_url(line), timeout=5)


def test_ui_answers_through_the_harness_it_is_given(tmp_path: Path) -> None:
    """``innerloop ui --harness MODULE:ATTR``: the page's answer to the suspended run lands
    in that harness's resume, and the run goes on to its end; Ctrl-C stops it."""
    from innerloop.ui._app import PAGE_HEADER

    from .answering import ASKED, RUN, RUN_ID, suspended_run

    db, _ = suspended_run(tmp_path)
    args = ["ui", "--runs", str(tmp_path), "--port", "0"]
    args += ["--harness", "tests.ui.answering:harness_from_env"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "innerloop", *args],
        cwd=ROOT,
        env={**_env(), "INNERLOOP_TEST_DB": db},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = _url(_line_with(proc.stdout, "innerloop ui: "))
        page = httpx.get(url, timeout=10).text
        key = page.split('<meta name="innerloop-page" content="')[1].split('"')[0]
        answer = httpx.post(
            url + f"api/answer/{RUN}",
            json={"interrupt": ASKED, "answer": True},
            headers={PAGE_HEADER: key},
            timeout=20,
        )
        assert answer.status_code == 202, answer.text
        runs: list[dict[str, object]] = []
        for _ in range(300):  # the answered run goes on in the server's thread
            runs = httpx.get(url + "api/runs", timeout=10).json()["runs"]
            if all(r["status"] == "finished" for r in runs):
                break
            time.sleep(0.1)
        # its log's run and the store's (the harness's store is listed without --db)
        assert [(r["id"], r["exit_reason"]) for r in runs] == [
            (RUN, "model_complete"),
            (f"db:{RUN_ID}", "model_complete"),
        ]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def test_ui_refuses_a_harness_without_a_store(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ui", "--harness", "tests.ui.answering:harness_without_store"]) == 2
    assert capsys.readouterr().err == (
        "innerloop ui: error: --harness: tests.ui.answering:harness_without_store has no "
        "checkpoint store: the page answers a run through the store that keeps it; build the "
        "Harness with checkpointer='sqlite:///runs.db'\n"
    )
