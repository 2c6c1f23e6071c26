"""Child processes that can really be stopped.

Every child starts in a new session, so it leads its own process group. When the call ends
(normally, at its timeout, or because the awaiting task was cancelled by a timeout or an
abort) the whole group is killed with SIGKILL: grandchildren such as ``sleep 100 &`` go too.
A grandchild that starts its own session (``setsid``) leaves the group and is out of reach.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any

import attrs

__all__ = ["ProcessResult", "run_process", "scrub_env"]

CAPTURE_LIMIT = 1 << 20
"""Bytes kept of each stream (half from the start, half from the end); the rest is counted
and dropped while reading, so a child printing gigabytes costs no memory."""

_SECRET_PARTS = frozenset(
    {
        "KEY",
        "KEYS",
        "APIKEY",
        "TOKEN",
        "TOKENS",
        "SECRET",
        "SECRETS",
        "PASSWORD",
        "PASSWD",
        "PASS",
        "CREDENTIAL",
        "CREDENTIALS",
        "AUTH",
        "COOKIE",
        "SESSION",
        "PRIVATE",
        "DSN",
    }
)
_SECRET_PREFIXES = ("AWS_", "AZURE_", "GCP_", "GOOGLE_", "ANTHROPIC_", "OPENAI_", "HF_", "GH_")


def _is_secret(name: str) -> bool:
    upper = name.upper()
    if upper.startswith(_SECRET_PREFIXES):
        return True
    return any(part in _SECRET_PARTS for part in re.split(r"[^A-Z0-9]+", upper))


def scrub_env(env: Mapping[str, str], *, keep: Sequence[str] = ()) -> dict[str, str]:
    """``env`` without API keys, tokens, passwords and other secrets: any name with a part
    such as KEY, TOKEN, SECRET, PASSWORD or CREDENTIALS, and provider prefixes (AWS_,
    ANTHROPIC_, OPENAI_, ...). Names in ``keep`` survive."""
    return {k: v for k, v in env.items() if k in keep or not _is_secret(k)}


@attrs.frozen
class ProcessResult:
    """What a child process did. ``stdout``/``stderr`` are decoded and may carry a notice
    of bytes dropped in the middle (see :data:`CAPTURE_LIMIT`)."""

    stdout: str
    stderr: str
    exit_code: int | None
    timed_out: bool
    duration: float


class _Capture:
    """Keeps the head and the tail of a byte stream and counts what it drops."""

    def __init__(self, limit: int) -> None:
        self.half = limit // 2
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.half - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > self.half:
                del self.tail[: len(self.tail) - self.half]

    def text(self) -> str:
        dropped = self.total - len(self.head) - len(self.tail)
        head = self.head.decode("utf-8", "replace")
        if dropped <= 0:
            return head + self.tail.decode("utf-8", "replace")
        notice = f"\n[... {dropped:,} bytes of {self.total:,} not kept ...]\n"
        return head + notice + self.tail.decode("utf-8", "replace")


async def _pump(stream: asyncio.StreamReader | None, capture: _Capture) -> None:
    if stream is None:
        return
    while chunk := await stream.read(1 << 16):
        capture.feed(chunk)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


async def run_process(
    argv: Sequence[str],
    *,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    stdin: bytes | None = None,
    timeout: float | None = None,
    capture_limit: int = CAPTURE_LIMIT,
    on_partial: Callable[[ProcessResult], None] | None = None,
) -> ProcessResult:
    """Run ``argv`` in its own process group and capture its output.

    At ``timeout`` the group is killed and the result says ``timed_out``. If the awaiting
    task is cancelled the group is killed too, ``on_partial`` receives what the child
    printed so far, and the cancellation propagates.
    """
    start = time.monotonic()
    transport, protocol = await _spawn(argv, cwd, env, stdin is not None)
    proc = asyncio.subprocess.Process(transport, protocol, asyncio.get_running_loop())
    out, err = _Capture(capture_limit), _Capture(capture_limit)
    pumps = [
        asyncio.ensure_future(_pump(proc.stdout, out)),
        asyncio.ensure_future(_pump(proc.stderr, err)),
    ]
    timed_out = False

    def result() -> ProcessResult:
        return ProcessResult(
            out.text(), err.text(), proc.returncode, timed_out, time.monotonic() - start
        )

    try:
        if stdin is not None and proc.stdin is not None:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                proc.stdin.write(stdin)
                await proc.stdin.drain()
            proc.stdin.close()
        try:
            await asyncio.wait_for(protocol.exited.wait(), timeout)
        except TimeoutError:
            timed_out = True
    except asyncio.CancelledError:
        await _finish(_stop(transport, protocol, pumps))
        if on_partial is not None:
            on_partial(result())
        raise
    await _finish(_stop(transport, protocol, pumps))
    return result()


async def _spawn(
    argv: Sequence[str],
    cwd: str | os.PathLike[str] | None,
    env: Mapping[str, str] | None,
    with_stdin: bool,
) -> tuple[asyncio.SubprocessTransport, _Protocol]:
    """Start the child. The child runs (and may start its own children) before the
    transport is ready; a cancellation in that window lets the start finish and then
    kills the group, instead of leaving the grandchildren behind."""
    loop = asyncio.get_running_loop()
    spawn = asyncio.ensure_future(
        loop.subprocess_exec(
            lambda: _Protocol(loop),
            *argv,
            cwd=cwd,
            env=dict(env) if env is not None else None,
            stdin=asyncio.subprocess.PIPE if with_stdin else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
    )
    try:
        return await asyncio.shield(spawn)
    except asyncio.CancelledError:
        await _finish(_stop_spawned(spawn))
        raise


async def _stop_spawned(
    spawn: asyncio.Future[tuple[asyncio.SubprocessTransport, _Protocol]],
) -> None:
    try:
        transport, protocol = await spawn
    except Exception:  # it never started: nothing to stop
        return
    await _stop(transport, protocol, ())


async def _finish(cleanup: Coroutine[Any, Any, None]) -> None:
    """Run ``cleanup`` to its end even if the caller is cancelled again meanwhile (a
    second cancellation must not leave a process group alive); then re-raise it."""
    task = asyncio.ensure_future(cleanup)
    cancelled = False
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            cancelled = True
    task.result()
    if cancelled:
        raise asyncio.CancelledError


class _Protocol(asyncio.subprocess.SubprocessStreamProtocol):
    """Also tells when the child itself exited (``Process.wait`` waits for its pipes too,
    which a background grandchild can hold open)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(limit=1 << 16, loop=loop)
        self.exited = asyncio.Event()

    def process_exited(self) -> None:
        super().process_exited()
        self.exited.set()


async def _stop(
    transport: asyncio.SubprocessTransport,
    protocol: _Protocol,
    pumps: Sequence[asyncio.Task[None]],
) -> None:
    """Kill the group (also after a normal exit: stray background children go), wait for
    the child's exit, and drain the pipes; a pipe held open by a grandchild that escaped
    the group is abandoned after a second."""
    _kill_group(transport.get_pid())
    await protocol.exited.wait()
    _, pending = await asyncio.wait(pumps, timeout=1.0)
    for p in pending:
        p.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    transport.close()
