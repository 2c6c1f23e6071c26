"""Sandbox: an allowlisted environment, bubblewrap isolation (no host credential by any
route, no network, the workspace the only writable host path), every descendant killed,
and the fallback when bubblewrap cannot run."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import stat
import subprocess
import sys
import textwrap
import threading
import time
import uuid
import warnings
from pathlib import Path
from typing import Any

import pytest

from innerloop.tools import Sandbox, SandboxError, SandboxWarning, builtin_tools
from innerloop.tools._sandbox import _interpreter_dirs

LEAKS = {
    "ANTHROPIC_API_KEY": "sk-ant-LEAK1",
    "PGPASSWORD": "LEAK2",
    "GHTOKEN": "LEAK3",
    "CLIENTSECRET": "LEAK4",
    "DATABASE_URL": "postgres://u:LEAK5@db/x",
    "SLACK_WEBHOOK_URL": "https://hooks.example/LEAK6",
}


def bubblewrap_problem() -> str | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            Sandbox(isolation="bubblewrap").prepare("/")
    except SandboxError as exc:
        return str(exc)
    return None


needs_bwrap = pytest.mark.skipif(
    bubblewrap_problem() is not None, reason=f"bubblewrap cannot run here: {bubblewrap_problem()}"
)
MODES = [pytest.param("bubblewrap", marks=needs_bwrap), "process"]


def survivors(marker: str) -> list[int]:
    """Host pids of live processes whose command line holds ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


def all_gone(marker: str, within: float = 1.0) -> bool:
    deadline = time.monotonic() + within
    while survivors(marker):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def naps() -> tuple[str, str]:
    """A marker and a shell line that leaves three sleepers carrying it: one in the
    background, one double-forked, one in its own session (setsid)."""
    marker = f"100.{uuid.uuid4().int % 10**9}"
    line = f"sleep {marker} & (sleep {marker} &) ; setsid sleep {marker} & echo started"
    return marker, line


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


def shell(prepared: Any, command: str, **kw: Any) -> Any:
    return asyncio.run(prepared.run(["/bin/sh", "-c", command], **kw))


class TestPolicy:
    def test_bad_settings_are_refused_with_the_fix(self, ws: Path) -> None:
        """Unknown isolation, relative or missing paths, a bare string: refused at once."""
        with pytest.raises(SandboxError, match=r"isolation='docker'\) is unknown; choose from"):
            Sandbox(isolation="docker")  # type: ignore[arg-type]
        with pytest.raises(SandboxError, match="path 'data' is relative; give an absolute"):
            Sandbox(read_only=["data"])
        with pytest.raises(SandboxError, match="got the string 'PGHOST'; wrap it"):
            Sandbox(env="PGHOST")
        with pytest.raises(SandboxError, match="'/nope/x' does not exist; create it or leave"):
            Sandbox(isolation="process", read_only=["/nope/x"]).prepare(ws)

    def test_is_frozen_data(self) -> None:
        """A Sandbox is a frozen value; set_env cannot be changed behind its back."""
        box = Sandbox(env=["PGHOST"], set_env={"A": "1"})
        assert box == Sandbox(env=("PGHOST",), set_env={"A": "1"})
        with pytest.raises(TypeError):
            box.set_env["B"] = "2"  # type: ignore[index]


@pytest.mark.parametrize("mode", MODES)
class TestEnvironment:
    def test_only_the_allowlist_reaches_the_command(self, ws: Path, mode: str) -> None:
        """Secrets the old denylist missed never arrive; declared and set names do."""
        host = {**LEAKS, "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PGHOST": "db", "X": "1"}
        box = Sandbox(isolation=mode, env=("PGHOST",), set_env={"MODE": "test"})  # type: ignore[arg-type]
        result = shell(box.prepare(ws, host_env=host), "env | sort")
        names = [line.split("=", 1)[0] for line in result.stdout.splitlines()]
        expected = ["LANG", "MODE", "PATH", "PGHOST", "PWD"]
        if mode == "bubblewrap":  # its own HOME and TMPDIR, each a fresh tmpfs
            expected += ["HOME", "TMPDIR"]
        assert names == sorted(expected)
        assert "PGHOST=db" in result.stdout
        assert "MODE=test" in result.stdout

    def test_parent_environment_is_clean(self, ws: Path, mode: str) -> None:
        """/proc/$PPID/environ (the sandbox's own parent) holds no host secret."""
        host = {**LEAKS, "PATH": "/usr/bin:/bin"}
        prepared = Sandbox(isolation=mode).prepare(ws, host_env=host)  # type: ignore[arg-type]
        result = shell(prepared, "tr '\\0' '\\n' < /proc/$PPID/environ")
        assert result.exit_code == 0
        assert "PATH=/usr/bin:/bin" in result.stdout
        assert "LEAK" not in result.stdout


HOST_SCRIPT = """
import asyncio, json, os, sys
from innerloop.tools import Sandbox, builtin_tools
from innerloop.tools._runner import ToolRunner
from innerloop._messages import ToolUseBlock
from tests.tools.conftest import fake_run

ws, command = sys.argv[1], sys.argv[2].replace("{pid}", str(os.getpid()))
tools = builtin_tools("shell", workspace=ws, sandbox=Sandbox(isolation="bubblewrap"))
call = ToolUseBlock("t1", "run_shell", {"command": command})
[result] = asyncio.run(ToolRunner().run_calls(fake_run(tools), [call])).results
print(json.dumps({"output": result.output}))
"""


@needs_bwrap
class TestBubblewrap:
    def test_no_host_credential_by_any_route(self, ws: Path, tmp_path: Path) -> None:
        """A host whose own environment and files hold credentials: inside, neither env,
        nor any /proc/*/environ, nor the host's /proc entry, nor a file outside the
        workspace shows one."""
        home = tmp_path / "home"
        home.mkdir()
        (home / ".netrc").write_text("machine db login u password LEAK7\n")
        (tmp_path / ".env").write_text("PGPASSWORD=LEAK8\n")
        env = {**os.environ, **LEAKS, "HOME": str(home)}
        hidden = " ".join(
            f"--exclude-dir={d.lstrip('/')}" for d in ("/usr", "/proc", "/sys", "/dev")
        )
        command = "; ".join(
            [
                "env",
                "cat /proc/*/environ | tr '\\0' '\\n'",
                "cat /proc/$HOSTPID/environ",
                f"cat {home}/.netrc {tmp_path}/.env",
                "ls -a $HOME /root /home 2>&1",
                f"grep -rIl LEAK / {hidden} "
                + " ".join(f"--exclude-dir={d.rsplit('/', 1)[-1]}" for d in _interpreter_dirs()),
                "echo done",
            ]
        )
        proc = subprocess.run(
            [sys.executable, "-c", HOST_SCRIPT, str(ws), command.replace("$HOSTPID", "{pid}")],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            cwd=Path(__file__).parents[2],
        )
        assert proc.returncode == 0, proc.stderr
        output = json.loads(proc.stdout)["output"]
        assert "\ndone\n" in output, output
        assert "LEAK" not in output, output
        assert "No such file or directory" in output  # the host's files are absent

    def test_interpreter_dirs_hold_no_planted_secret(self) -> None:
        """The directories bound for Python are its installation, not a home or a project."""
        for path in _interpreter_dirs():
            assert Path(path, "bin").is_dir() or Path(path, "lib").is_dir(), path

    def test_only_the_workspace_is_writable(self, ws: Path, tmp_path: Path) -> None:
        """The workspace takes writes; /usr, /etc and the host's other paths do not."""
        (tmp_path / "sibling.txt").write_text("host")
        prepared = Sandbox(isolation="bubblewrap").prepare(ws)
        result = shell(
            prepared,
            f"echo hi > made.txt; touch /usr/x /etc/x; cat {tmp_path}/sibling.txt; "
            "echo tmp > /tmp/t && cat /tmp/t; echo h > $HOME/h && cat $HOME/h",
        )
        assert (ws / "made.txt").read_text() == "hi\n"
        assert "touch: cannot touch '/usr/x': Read-only file system" in result.stderr
        assert "touch: cannot touch '/etc/x'" in result.stderr
        assert f"cat: {tmp_path}/sibling.txt: No such file or directory" in result.stderr
        assert result.stdout == "tmp\nh\n"
        assert not (tmp_path / "t").exists()

    def test_no_network_unless_allowed(self, ws: Path) -> None:
        """A server on the host's loopback is out of reach; network=True reaches it."""
        server = socket.create_server(("127.0.0.1", 0))
        port = server.getsockname()[1]

        def accept() -> None:
            while True:
                try:
                    conn, _ = server.accept()
                except OSError:
                    return
                conn.sendall(b"hello")
                conn.close()

        threading.Thread(target=accept, daemon=True).start()
        code = textwrap.dedent(
            f"""
            import socket
            try:
                print(socket.create_connection(("127.0.0.1", {port}), timeout=2).recv(5))
            except OSError as exc:
                print("refused", type(exc).__name__)
            """
        )
        try:
            closed = Sandbox(isolation="bubblewrap").prepare(ws)
            result = asyncio.run(closed.run([sys.executable, "-I", "-c", code]))
            assert result.stdout.startswith("refused"), result
            shared = Sandbox(isolation="bubblewrap", network=True).prepare(ws)
            result = asyncio.run(shared.run([sys.executable, "-I", "-c", code]))
            assert result.stdout == "b'hello'\n", result
        finally:
            server.close()

    def test_its_own_processes_only(self, ws: Path) -> None:
        """Inside, /proc lists the sandbox's processes alone."""
        result = shell(Sandbox(isolation="bubblewrap").prepare(ws), "ls /proc | grep -c '^[0-9]'")
        assert int(result.stdout) <= 4  # bwrap's init, sh, ls, grep


@pytest.mark.parametrize("mode", MODES)
class TestDescendants:
    def test_none_survives_the_end_of_the_command(self, ws: Path, mode: str) -> None:
        """A command that exits leaving sleepers (setsid included) returns at once, and
        every sleeper is gone."""
        marker, line = naps()
        prepared = Sandbox(isolation=mode).prepare(ws)  # type: ignore[arg-type]
        start = time.monotonic()
        result = shell(prepared, line)
        assert (result.exit_code, result.stdout) == (0, "started\n")
        assert time.monotonic() - start < 3.0
        assert all_gone(marker)

    def test_none_survives_the_timeout(self, ws: Path, mode: str) -> None:
        """At the timeout every descendant is killed, setsid ones included."""
        marker, line = naps()
        prepared = Sandbox(isolation=mode).prepare(ws)  # type: ignore[arg-type]
        result = shell(prepared, f"{line}; sleep {marker}", timeout=1.0)
        assert (result.timed_out, result.stdout) == (True, "started\n")
        assert all_gone(marker)

    def test_none_survives_an_abort(self, ws: Path, mode: str) -> None:
        """A cancelled call (an abort) leaves no descendant behind."""
        marker, line = naps()
        prepared = Sandbox(isolation=mode).prepare(ws)  # type: ignore[arg-type]

        async def abort_when_started() -> None:
            task = asyncio.ensure_future(prepared.run(["/bin/sh", "-c", f"{line}; wait"]))
            while len(survivors(marker)) < 3:  # noqa: ASYNC110  waits on other processes
                await asyncio.sleep(0.02)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(asyncio.wait_for(abort_when_started(), 20))
        assert all_gone(marker)

    def test_through_the_tool(self, ws: Path, mode: str, call_tool: Any) -> None:
        """run_shell at its timeout: reported as timed out, nothing left running."""
        marker, line = naps()
        tools = builtin_tools("shell", workspace=ws, sandbox=Sandbox(isolation=mode))  # type: ignore[arg-type]
        result = call_tool(
            tools, "run_shell", {"command": f"{line}; sleep {marker}"}, tool_timeouts={"shell": 1}
        )
        assert result.timed_out
        assert result.stdout == "started\n"
        assert all_gone(marker)


def fake_bwrap(tmp_path: Path, said: str) -> str:
    """A bwrap that fails as it does in a container without user namespaces."""
    path = tmp_path / "bwrap"
    path.write_text(f"#!/bin/sh\necho '{said}' >&2\nexit 1\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


class TestFallback:
    def test_missing_bubblewrap_falls_back_with_a_warning(self, ws: Path) -> None:
        """auto without bubblewrap: the process sandbox, and a warning saying the fix."""
        with pytest.warns(SandboxWarning) as caught:
            prepared = Sandbox(bwrap="/nonexistent/bwrap").prepare(ws)
        assert prepared.mode == "process"
        assert str(caught[0].message) == (
            "bubblewrap is not installed (no '/nonexistent/bwrap' on PATH): run_shell and "
            "run_python run with isolation='process' (an allowlisted environment and every "
            "descendant killed; files outside the workspace, the network and other "
            "processes stay reachable); install bubblewrap (Debian/Ubuntu: apt-get install "
            "bubblewrap) or pass Sandbox(isolation='process') to choose this explicitly"
        )

    def test_bubblewrap_without_namespaces_is_detected(self, ws: Path, tmp_path: Path) -> None:
        """A bwrap that cannot create namespaces here counts as missing; its words are
        quoted."""
        bwrap = fake_bwrap(tmp_path, "bwrap: No permissions to create new namespace")
        with pytest.warns(SandboxWarning, match="bwrap said: bwrap: No permissions to create"):
            prepared = Sandbox(bwrap=bwrap).prepare(ws)
        assert prepared.mode == "process"
        assert shell(prepared, "echo still runs").stdout == "still runs\n"

    def test_required_bubblewrap_is_an_error(self, ws: Path) -> None:
        """isolation='bubblewrap' never falls back: it fails when the tools are built."""
        with pytest.raises(SandboxError) as caught:
            builtin_tools(
                "shell",
                workspace=ws,
                sandbox=Sandbox(isolation="bubblewrap", bwrap="/nonexistent/bwrap"),
            )
        assert str(caught.value) == (
            "Sandbox(isolation='bubblewrap') cannot run: bubblewrap is not installed (no "
            "'/nonexistent/bwrap' on PATH); install it (Debian/Ubuntu: apt-get install "
            "bubblewrap) or pass Sandbox(isolation='process')"
        )

    def test_explicit_process_mode_is_quiet(self, ws: Path) -> None:
        """Choosing isolation='process' warns about nothing."""
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            prepared = Sandbox(isolation="process").prepare(ws)
        assert repr(prepared).startswith(f"<sandbox process root={str(ws)!r} env=[")


def first_line(text: str) -> str:
    return text.split("\n", 1)[0]


class TestLimitSettings:
    def test_documented_defaults(self) -> None:
        """Every limit is on by default, at the documented value."""
        box = Sandbox()
        assert (box.memory_mb, box.max_processes, box.file_size_mb, box.tmpfs_mb) == (
            1024,
            64,
            256,
            256,
        )

    @pytest.mark.parametrize("value", [0, -1, 1.5, True, "64"])
    def test_bad_limits_are_refused(self, value: Any) -> None:
        """A limit must be a positive int (or None for no limit)."""
        with pytest.raises(SandboxError) as info:
            Sandbox(max_processes=value)
        assert str(info.value) == (
            f"Sandbox(max_processes={value!r}) must be a positive int, or None for no limit"
        )

    @needs_bwrap
    def test_each_tmpfs_gets_the_size(self, ws: Path) -> None:
        """/tmp, $HOME and /dev/shm are each a tmpfs of tmpfs_mb (none without it)."""
        sized = Sandbox(isolation="bubblewrap", tmpfs_mb=3).prepare(ws)
        result = shell(sized, "df -k /tmp /home/sandbox /dev/shm | tail -n +2")
        assert [line.split()[1] for line in result.stdout.splitlines()] == ["3072"] * 3
        free = Sandbox(isolation="bubblewrap", tmpfs_mb=None).prepare(ws)
        assert "--size" not in free.prefix


@pytest.mark.parametrize("mode", MODES)
class TestLimits:
    def test_memory(self, ws: Path, mode: str, call_tool: Any) -> None:
        """A program allocating past memory_mb fails, and the result names the limit;
        without the limit the same program runs."""
        code = "data = bytearray(400 << 20); print(len(data) >> 20)"
        limited = builtin_tools(
            "python",
            workspace=ws,
            sandbox=Sandbox(isolation=mode, memory_mb=128),  # type: ignore[arg-type]
        )
        result = call_tool(limited, "run_python", {"code": code})
        assert result.is_error
        assert first_line(result.output) == (
            "run_python: the command went over the memory limit (128 MB per process); make "
            "it use less, or raise Sandbox(memory_mb=...)"
        )
        assert result.exit_code == 1
        assert result.stderr.endswith("MemoryError\n")
        free = builtin_tools(
            "python",
            workspace=ws,
            sandbox=Sandbox(isolation=mode, memory_mb=None),  # type: ignore[arg-type]
        )
        ok = call_tool(free, "run_python", {"code": code})
        assert (ok.is_error, ok.stdout) == (False, "400\n")

    def test_processes(self, ws: Path, mode: str, call_tool: Any) -> None:
        """A command starting more processes than max_processes is stopped with all of
        them, and the result names the limit."""
        marker = f"100.{uuid.uuid4().int % 10**9}"
        tools = builtin_tools(
            "shell",
            workspace=ws,
            sandbox=Sandbox(isolation=mode, max_processes=8),  # type: ignore[arg-type]
        )
        line = f"echo started; for i in $(seq 12); do sleep {marker} & done; wait"
        result = call_tool(tools, "run_shell", {"command": line})
        assert result.is_error
        assert not result.timed_out
        assert first_line(result.output) == (
            "run_shell: the command went over the process limit (8); it was stopped with "
            "everything it started (start fewer processes, or raise Sandbox(max_processes=...))"
        )
        assert result.stdout == "started\n"
        assert all_gone(marker)
        within = call_tool(tools, "run_shell", {"command": "sleep 0 & sleep 0 & wait; echo ok"})
        assert (within.is_error, within.stdout) == (False, "ok\n")

    def test_file_size(self, ws: Path, mode: str, call_tool: Any) -> None:
        """A file cannot grow past file_size_mb; the write fails and the result names the
        limit."""
        tools = builtin_tools(
            "shell",
            workspace=ws,
            sandbox=Sandbox(isolation=mode, file_size_mb=2),  # type: ignore[arg-type]
        )
        result = call_tool(tools, "run_shell", {"command": "head -c 8M /dev/zero > big"})
        assert result.is_error
        assert first_line(result.output) == (
            "run_shell: the command went over the file size limit (2 MB per file); write "
            "less, or raise Sandbox(file_size_mb=...)"
        )
        assert result.stderr == "head: error writing 'standard output': File too large\n"
        assert (ws / "big").stat().st_size == 2 << 20

    def test_tmpfs(self, ws: Path, mode: str, call_tool: Any) -> None:
        """Under bubblewrap /tmp holds tmpfs_mb at most, and filling it names the limit;
        the process level has no tmpfs of its own (the file size limit still holds)."""
        if mode != "bubblewrap":
            pytest.skip("the process level has no tmpfs of its own")
        tools = builtin_tools(
            "python",
            workspace=ws,
            sandbox=Sandbox(isolation="bubblewrap", tmpfs_mb=2, file_size_mb=None),
        )
        code = "for i in range(3):\n    open(f'/tmp/f{i}', 'wb').write(bytes(1 << 20))"
        result = call_tool(tools, "run_python", {"code": code})
        assert result.is_error
        assert first_line(result.output) == (
            "run_python: the command went over the tmpfs size limit (2 MB for each of /tmp, "
            "$HOME and /dev/shm), or filled a disk; write less there, or raise "
            "Sandbox(tmpfs_mb=...)"
        )
        assert result.stderr.endswith("OSError: [Errno 28] No space left on device\n")

    def test_signals_as_a_shell_leaves_them(self, ws: Path, mode: str) -> None:
        """SIGPIPE keeps its default (``yes | head`` ends quietly); SIGXFSZ is ignored only
        under a file size limit, so a write past it fails with "File too large"."""
        line = "yes | head -1; grep SigIgn /proc/self/status"
        xfsz = 1 << (25 - 1)
        for file_size_mb, ignored in ((None, 0), (1, xfsz)):
            box = Sandbox(isolation=mode, file_size_mb=file_size_mb)  # type: ignore[arg-type]
            result = shell(box.prepare(ws), line)
            assert result.stderr == ""
            said, mask = result.stdout.split("\n")[:2]
            assert said == "y"
            assert int(mask.split()[1], 16) & (xfsz | 1 << (13 - 1)) == ignored

    def test_process_limit_counts_the_shell_and_its_children(self, ws: Path, mode: str) -> None:
        """max_processes=3 holds the shell and two sleepers (until the timeout ends them);
        a third sleeper is one too many (bubblewrap's own init is not counted)."""
        marker = f"100.{uuid.uuid4().int % 10**9}"
        prepared = Sandbox(isolation=mode, max_processes=3).prepare(ws)  # type: ignore[arg-type]
        outcomes = []
        for sleepers, timeout in ((2, 1.0), (3, 60.0)):  # the timeout ends the first
            line = f"for i in $(seq {sleepers}); do sleep {marker} & done; wait"
            result = shell(prepared, line, timeout=timeout)
            outcomes.append((result.over_processes, result.timed_out))
        assert outcomes == [(False, True), (True, False)]
        assert all_gone(marker)
