"""Child processes that can really be stopped.

Every child starts in a new session, so it leads its own process group. When the call ends
(normally, at its timeout, or because the awaiting task was cancelled by a timeout or an
abort) the whole group is killed with SIGKILL: grandchildren such as ``sleep 100 &`` go too.

A grandchild that starts its own session (``setsid``) leaves the group. With
``reaper=True`` the command runs under a small subreaper process (Linux
``prctl(PR_SET_CHILD_SUBREAPER)``): every orphaned descendant is re-parented to it, so it
can find and kill all of them, ``setsid`` ones included, when the command ends or when it
is told to stop (SIGTERM from here, or the death of this process). Inside a bubblewrap
PID namespace (see ``innerloop.tools._sandbox``) the namespace does the same job.

Output is read as it comes and only :data:`CAPTURE_LIMIT` bytes of each stream are kept
(head and tail), so a child printing gigabytes costs no memory.

Resource limits: ``rlimits`` are set (``ulimit``, no root needed) by a ``/bin/sh`` shim
that then becomes the command (``exec``), so the command and everything it starts inherit
them (the address space, ``RLIMIT_AS``, bounds each process's memory; ``RLIMIT_FSIZE``
each file's size: ``SIGXFSZ`` is left ignored, so a write past it fails with ``EFBIG``,
"File too large", instead of killing the writer silently). ``max_processes`` is a count
check: every :data:`PROCESS_CHECK_INTERVAL` seconds the command's descendants are counted
(through ``/proc/<pid>/task/<tid>/children``) and past the limit the whole group is
stopped, as at a timeout, and the result says ``over_processes``. (``RLIMIT_NPROC`` cannot
serve: outside a user namespace it counts every process of the user, and it does not hold
for root, even inside bubblewrap's namespace.) A fork faster than the count can get ahead
of it for up to one interval; each such process is still bounded by ``RLIMIT_AS``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from contextvars import ContextVar
from typing import Any

import attrs

__all__ = ["CHILD_ENV", "ProcessResult", "run_process"]

CAPTURE_LIMIT = 1 << 20
"""Bytes kept of each stream (half from the start, half from the end); the rest is counted
and dropped while reading."""

REAPER_GRACE = 2.0
"""Seconds the subreaper gets to kill the descendants before its group is killed anyway."""

PROCESS_CHECK_INTERVAL = 0.05
"""Seconds between two counts of a command's processes (``max_processes``)."""

_ULIMIT = {"RLIMIT_AS": ("-v", 1024), "RLIMIT_FSIZE": ("-f", 512)}
"""The ``ulimit`` option and unit (bytes) of each limit the shim sets (POSIX ``sh``: dash, and
bash as ``sh``, count ``-f`` in 512-byte blocks)."""

_REAPER = r"""
import ctypes, os, resource, signal, sys, time

STOPS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)

class Stop(BaseException):
    pass

def on_signal(sig, frame):
    signal.pthread_sigmask(signal.SIG_BLOCK, STOPS)  # one stop is enough
    raise Stop

def kill_all():
    # SIGKILL every descendant until none is left; orphans are re-parented to this
    # process (a subreaper), so a setsid grandchild is still found here
    me, give_up = str(os.getpid()), time.monotonic() + 2.0
    while time.monotonic() < give_up:
        tree = {}
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    with open("/proc/" + name + "/stat", "rb") as fh:
                        stat = fh.read()
                except OSError:
                    continue
                ppid = stat.rsplit(b")", 1)[1].split()[1].decode()
                tree.setdefault(ppid, []).append(name)
        todo = [me]
        while todo:
            for kid in tree.get(todo.pop(), ()):
                todo.append(kid)
                try:
                    os.kill(int(kid), signal.SIGKILL)
                except OSError:
                    pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            return
        time.sleep(0.005)

def main():
    host, argv = int(sys.argv[1]), sys.argv[2:]
    for sig in STOPS:
        signal.signal(sig, on_signal)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG: the host died
    status = None
    try:
        if os.getppid() != host:
            raise Stop
        child = os.fork()
        if child == 0:
            try:
                for sig in (*STOPS, signal.SIGPIPE, signal.SIGXFSZ):  # Python ignores the last two
                    signal.signal(sig, signal.SIG_DFL)
                signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPS)
                # the environment as given, without what Python added (LC_CTYPE)
                with open("/proc/self/environ", "rb") as fh:
                    env = dict(v.split(b"=", 1) for v in fh.read().split(b"\0") if b"=" in v)
                os.execvpe(argv[0], argv, env)
            except OSError as exc:
                sys.stderr.write(argv[0] + ": " + exc.strerror + "\n")
            finally:
                os._exit(127)
        while True:
            pid, status = os.wait()
            if pid == child:
                break
        kill_all()
    except Stop:
        kill_all()
        status = None
    if status is not None and os.WIFEXITED(status):
        os._exit(os.WEXITSTATUS(status))
    # end as the command ended (killed by a signal), or as killed when told to stop
    sig = os.WTERMSIG(status) if status is not None else signal.SIGKILL
    if sig != signal.SIGKILL:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the command dumped its core
        signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, (sig,))
    os.kill(os.getpid(), sig)
    os._exit(128 + sig)

main()
"""


@attrs.frozen
class ProcessResult:
    """What a child process did. ``stdout``/``stderr`` are decoded and may carry a notice
    of bytes dropped in the middle (see :data:`CAPTURE_LIMIT`)."""

    stdout: str
    stderr: str
    exit_code: int | None
    timed_out: bool
    duration: float
    over_processes: bool = False
    """Stopped because it started more processes than ``max_processes``."""


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

    def take_text(self) -> str:
        """The kept bytes, decoded, with a notice of what was dropped; the bytes are freed
        as they are decoded (so the peak is about twice the limit), so take it once."""
        dropped = self.total - len(self.head) - len(self.tail)
        head = self.head.decode("utf-8", "replace")
        self.head = bytearray()
        tail = self.tail.decode("utf-8", "replace")
        self.tail = bytearray()
        if dropped <= 0:
            return head + tail
        return f"{head}\n[... {dropped:,} bytes of {self.total:,} not kept ...]\n{tail}"


async def _pump(stream: asyncio.StreamReader | None, capture: _Capture) -> None:
    if stream is None:
        return
    while chunk := await stream.read(1 << 16):
        capture.feed(chunk)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _reaped(argv: Sequence[str]) -> list[str]:
    """``argv`` run under the subreaper (see the module docstring)."""
    return [sys.executable, "-I", "-S", "-c", _REAPER, str(os.getpid()), *argv]


def _limited(argv: Sequence[str], rlimits: Mapping[str, int]) -> list[str]:
    """``argv`` run by a ``/bin/sh`` shim that first sets ``rlimits`` (soft and hard;
    under ``RLIMIT_FSIZE`` it leaves ``SIGXFSZ`` ignored, see the module docstring);
    ``sh`` starts in a few milliseconds, where a Python shim costs tens."""
    script = ['trap "" XFSZ'] if "RLIMIT_FSIZE" in rlimits else []
    for name, value in sorted(rlimits.items()):
        if name not in _ULIMIT:
            raise ValueError(f"run_process cannot set {name}; it sets {', '.join(_ULIMIT)}")
        option, unit = _ULIMIT[name]
        script.append(f"ulimit {option} {max(1, value // unit)} || exit 126")
    return ["/bin/sh", "-c", "; ".join([*script, 'exec "$@"']), "sh", *argv]


def _count_descendants(pid: int) -> int:
    """How many processes descend from ``pid`` (itself not counted); 0 once it is gone."""
    count, todo = 0, [pid]
    while todo:
        parent = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{parent}/task/{task}/children", "rb") as fh:
                    kids = fh.read().split()
            except OSError:
                continue
            count += len(kids)
            todo += map(int, kids)
    return count


async def _watch_processes(pid: int, limit: int) -> None:
    """Return once ``pid`` has more than ``limit`` descendants."""
    while _count_descendants(pid) <= limit:  # noqa: ASYNC110  other processes: no event
        await asyncio.sleep(PROCESS_CHECK_INTERVAL)


CHILD_ENV: ContextVar[Mapping[str, str] | None] = ContextVar("innerloop_child_env", default=None)
"""Variables added to the environment of every process :func:`run_process` starts in this
context (a sandbox's allowlist included): a tool observer sets ``TRACEPARENT`` here in a
tool call's own context, so the call's processes join its trace."""


def _with_child_env(env: Mapping[str, str] | None) -> Mapping[str, str] | None:
    extra = CHILD_ENV.get()
    if not extra:
        return env
    return {**(os.environ if env is None else env), **extra}


async def run_process(
    argv: Sequence[str],
    *,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    stdin: bytes | None = None,
    timeout: float | None = None,  # noqa: ASYNC109  public API; expiry is a result, not an error
    capture_limit: int = CAPTURE_LIMIT,
    on_partial: Callable[[ProcessResult], None] | None = None,
    reaper: bool = False,
    rlimits: Mapping[str, int] | None = None,
    max_processes: int | None = None,
    process_overhead: int = 0,
) -> ProcessResult:
    """Run ``argv`` in its own process group and capture its output.

    At ``timeout`` (counted from the call, the start of the child included) the group is
    killed and the result says ``timed_out``. If the awaiting task is cancelled the group
    is killed too, ``on_partial`` receives what the child printed so far, and the
    cancellation propagates. ``reaper=True`` (Linux) also kills every descendant that
    left the group (``setsid``), when the command ends or is stopped. ``rlimits``
    (``"RLIMIT_AS"`` and ``"RLIMIT_FSIZE"``, in bytes) are set for the command and
    everything it starts; past ``max_processes`` descendants (beyond
    ``process_overhead``, the processes of a wrapper such as bwrap) the group is stopped
    and the result says ``over_processes``: the descendants are counted every
    ``PROCESS_CHECK_INTERVAL`` seconds, so a fork faster than the count can get ahead of it
    for up to one interval (each such process is still bounded by ``RLIMIT_AS``).
    """
    start = time.monotonic()
    if rlimits:
        argv = _limited(argv, rlimits)
    if reaper:
        argv = _reaped(argv)
    env = _with_child_env(env)
    transport, protocol = await _spawn(argv, cwd, env, stdin is not None, reaper)
    proc = asyncio.subprocess.Process(transport, protocol, asyncio.get_running_loop())
    out, err = _Capture(capture_limit), _Capture(capture_limit)
    pumps = [
        asyncio.ensure_future(_pump(proc.stdout, out)),
        asyncio.ensure_future(_pump(proc.stderr, err)),
    ]
    timed_out = over = False
    waiters: list[asyncio.Future[Any]] = [asyncio.ensure_future(protocol.exited.wait())]
    if max_processes is not None:
        limit = max_processes + process_overhead
        waiters.append(asyncio.ensure_future(_watch_processes(transport.get_pid(), limit)))

    def result() -> ProcessResult:  # called once: it takes the captured output
        took = time.monotonic() - start
        return ProcessResult(
            out.take_text(), err.take_text(), proc.returncode, timed_out, took, over
        )

    try:
        if stdin is not None and proc.stdin is not None:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                proc.stdin.write(stdin)
                await proc.stdin.drain()
            proc.stdin.close()
        left = None if timeout is None else max(0.0, timeout - (time.monotonic() - start))
        done, _ = await asyncio.wait(waiters, timeout=left, return_when=asyncio.FIRST_COMPLETED)
        timed_out = not done
        over = waiters[0] not in done and any(w in done for w in waiters[1:])
    except asyncio.CancelledError:
        await _finish(_stop(transport, protocol, pumps, reaper))
        if on_partial is not None:
            on_partial(result())
        raise
    finally:
        for waiter in waiters:
            waiter.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)
    await _finish(_stop(transport, protocol, pumps, reaper))
    return result()


async def _spawn(
    argv: Sequence[str],
    cwd: str | os.PathLike[str] | None,
    env: Mapping[str, str] | None,
    with_stdin: bool,
    reaper: bool,
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
        await _finish(_stop_spawned(spawn, reaper))
        raise


async def _stop_spawned(
    spawn: asyncio.Future[tuple[asyncio.SubprocessTransport, _Protocol]], reaper: bool
) -> None:
    try:
        transport, protocol = await spawn
    except Exception:  # it never started: nothing to stop
        return
    await _stop(transport, protocol, (), reaper)


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
    reaper: bool,
) -> None:
    """Kill the group (also after a normal exit: stray background children go), wait for
    the child's exit, and drain the pipes; a pipe held open by a grandchild that escaped
    the group is abandoned after a second. A subreaper is first asked to kill every
    descendant (SIGTERM), and its group is killed anyway after :data:`REAPER_GRACE`."""
    pid = transport.get_pid()
    if reaper and not protocol.exited.is_set():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(protocol.exited.wait(), REAPER_GRACE)
    _kill_group(pid)
    await protocol.exited.wait()
    if pumps:
        _, pending = await asyncio.wait(pumps, timeout=1.0)
        for p in pending:
            p.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    transport.close()
