"""SIGINT, SIGTERM and SIGHUP while ``innerloop run`` starts: one line and exit 4, at any
point of the start-up (the package's heavy imports included), never a traceback.

The child runs the command line as ``python -m innerloop run ...`` does (``sys.argv[0]``
is ``-m`` while Python locates ``innerloop.__main__``), with an import hook that stops it
at a named module, so the signal arrives at a known point, not after some delay. There it
waits in short sleeps, as start-up runs Python between its imports: a signal the kernel
hands to another thread of the process (one a library started) is seen at the next step,
where one long sleep of the main thread would not be woken by it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from innerloop._boot import ABORT_SIGNALS, early_signals, is_command_line

ROOT = Path(__file__).resolve().parents[1]
CHILD = """
import importlib.abc, os, runpy, sys, time
STOP = sys.argv.pop(1)
sys.argv = ["-m", "run", "a task", "--no-live"]  # as python -m innerloop run sets it

class Stop(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == STOP:
            os.write(1, b"stopped\\n")
            for _ in range(600):  # start-up at work: the signal is seen between two steps
                time.sleep(0.1)
        return None

sys.meta_path.insert(0, Stop())
runpy._run_module_as_main("innerloop")
"""
STOPS = (
    "innerloop._errors",  # the package's first import after the handlers
    "anthropic",  # an SDK, imported once the command line runs (its own handlers then)
    "innerloop.cli",  # the package is imported; the command line is not yet running
)


def _as_from_a_terminal() -> None:
    """The child gets SIGINT and SIGHUP as a command typed at a terminal does: a suite
    started in the background (``cmd &`` in a script) passes SIGINT on ignored, one started
    under ``nohup`` SIGHUP, and the command line rightly leaves an ignored signal ignored;
    and none of the three blocked (a blocked mask is inherited across ``exec``, and a
    signal blocked stays pending: the command line never sees it)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, ABORT_SIGNALS)


def _signal_state(pid: int) -> str:
    """What the kernel says of ``pid``'s signals (hex masks: pending, blocked, ignored,
    caught) and its state: why a signal sent to it did nothing."""
    try:
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError as exc:
        return f"no /proc/{pid}/status: {exc}"
    keep = ("State", "ShdPnd", "SigPnd", "SigBlk", "SigIgn", "SigCgt", "Threads")
    return "; ".join(line for line in status if line.split(":")[0] in keep)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
@pytest.mark.parametrize("stop", STOPS)
def test_a_signal_during_start_up_exits_4_in_one_line(stop: str, sig: signal.Signals) -> None:
    """Wherever start-up is when the signal arrives: exit 4, one line naming it."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update({"PYTHONPATH": str(ROOT), "ANTHROPIC_API_KEY": "sk-ant-test"})
    with subprocess.Popen(
        [sys.executable, "-c", CHILD, stop],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=ROOT,
        preexec_fn=_as_from_a_terminal,
    ) as proc:
        assert proc.stdout is not None
        try:
            assert proc.stdout.readline() == b"stopped\n"
            proc.send_signal(sig)
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{sig.name} did not end the child in 30 s: {_signal_state(proc.pid)}")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 4, err.decode()
    assert err.decode() == f"innerloop run: interrupted by {sig.name}\n"


class TestEarlySignals:
    def test_only_the_command_line_is_recognised(self) -> None:
        """``-m`` and a command while the package is located, or the ``innerloop``
        script; nothing else (a host that imports innerloop, a durable worker)."""
        assert is_command_line(["-m", "run", "x"])
        assert is_command_line(["/venv/bin/innerloop", "runs", "list"])
        assert not is_command_line(["-m", "temporal-worker"])  # python -m innerloop.durable
        assert not is_command_line(["/usr/bin/pytest", "-q"])
        assert not is_command_line(["app.py"])
        assert not is_command_line([])

    def test_a_host_keeps_its_handlers(self) -> None:
        """Imported by a host, innerloop changes no signal handler."""
        before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
        assert early_signals(["app.py"]) is False
        assert {s: signal.getsignal(s) for s in before} == before
