"""Built-in tools: confined to the workspace, a search that stops, shell killed with its
children at the timeout, the task list. (The sandbox itself: test_sandbox.py.)"""

from __future__ import annotations

import asyncio
import os
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from innerloop.tools import BUILTIN_SETS, Workspace, builtin_tools, run_process, tool
from tests.tools.test_sandbox import all_gone, naps


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "notes.txt").write_text("alpha\nbeta\nalpha beta\n")
    (root / "sub").mkdir()
    (root / "sub" / "deep.txt").write_text("gamma\n")
    (tmp_path / "secret.txt").write_text("outside")
    (root / "out").symlink_to(tmp_path)  # a directory link leaving the root
    (root / "leak.txt").symlink_to(tmp_path / "secret.txt")
    (root / "inner.txt").symlink_to(root / "notes.txt")  # a link that stays inside
    return root


@pytest.fixture
def tools(ws: Path) -> Any:
    return builtin_tools(workspace=ws)


class TestSets:
    def test_names(self, ws: Path) -> None:
        """Each set brings its tools; no set named means all of them."""
        assert [t.name for t in builtin_tools("files", workspace=ws)] == [
            "read_file",
            "write_file",
            "edit_file",
            "list_dir",
            "search",
        ]
        assert [t.name for t in builtin_tools("shell", "python", workspace=ws)] == [
            "run_shell",
            "run_python",
        ]
        assert [t.name for t in builtin_tools("tasks")] == ["tasks"]
        assert len(builtin_tools(workspace=ws)) == 8
        assert BUILTIN_SETS == ("files", "shell", "python", "tasks")

    def test_categories(self, tools: Any) -> None:
        """File tools are 'file', run_shell 'shell', run_python 'code'."""
        assert {t.name: t.category for t in tools}["run_shell"] == "shell"
        assert {t.name: t.category for t in tools}["run_python"] == "code"
        assert {t.name: t.category for t in tools}["read_file"] == "file"

    def test_errors(self, ws: Path) -> None:
        """An unknown set or a missing workspace is refused with the fix."""
        with pytest.raises(ValueError, match="unknown built-in tool set 'web'; choose from"):
            builtin_tools("web", workspace=ws)
        with pytest.raises(ValueError, match="the 'shell' tools need workspace=<directory>"):
            builtin_tools("shell")


ESCAPES = [
    ("../secret.txt", "it escapes the workspace root through '..'"),
    ("sub/../../secret.txt", "it escapes the workspace root through '..'"),
    (
        "/etc/passwd",
        "absolute paths are not allowed; give a path relative to the workspace root",
    ),
    ("out/secret.txt", "it escapes the workspace root through a symlink ('out' points outside)"),
    ("leak.txt", "it escapes the workspace root through a symlink ('leak.txt' points outside)"),
]


class TestConfinement:
    @pytest.mark.parametrize(("path", "reason"), ESCAPES)
    @pytest.mark.parametrize(
        ("name", "extra"),
        [
            ("read_file", {}),
            ("write_file", {"content": "x"}),
            ("edit_file", {"old": "outside", "new": "pwned"}),
            ("list_dir", {}),
            ("search", {"pattern": "outside"}),
        ],
    )
    def test_escape_is_refused(
        self, tools: Any, call_tool: Any, ws: Path, path: str, reason: str, name: str, extra: Any
    ) -> None:
        """Every route out of the root is refused by every file tool; nothing changes."""
        result = call_tool(tools, name, {"path": path, **extra})
        assert result.is_error
        assert result.output == f"path {path!r} is refused: {reason}"
        assert (ws.parent / "secret.txt").read_text() == "outside"
        assert sorted(p.name for p in ws.parent.iterdir()) == ["secret.txt", "ws"]

    def test_links_inside_and_dotdot_inside_are_fine(self, tools: Any, call_tool: Any) -> None:
        """A symlink within the root and a '..' that stays inside are allowed."""
        assert call_tool(tools, "read_file", {"path": "inner.txt"}).output.startswith("alpha")
        assert call_tool(tools, "read_file", {"path": "sub/../notes.txt"}).output.startswith(
            "alpha"
        )

    def test_workspace_root_must_exist(self, tmp_path: Path) -> None:
        """A missing root is a clear error."""
        with pytest.raises(ValueError, match="is not a directory; create it"):
            Workspace(tmp_path / "nope")


class TestFileTools:
    def test_write_read_list(self, tools: Any, call_tool: Any, ws: Path) -> None:
        """write_file creates parents; read_file and list_dir see the result."""
        result = call_tool(tools, "write_file", {"path": "a/b/c.txt", "content": "héllo"})
        assert result.output == "wrote 6 bytes to a/b/c.txt"
        assert call_tool(tools, "read_file", {"path": "a/b/c.txt"}).output == "héllo"
        assert call_tool(tools, "list_dir", {}).output == (
            "a/\ninner.txt\nleak.txt -> (outside the workspace)\nnotes.txt\n"
            "out -> (outside the workspace)\nsub/"
        )

    def test_edit_exact_replacement(self, tools: Any, call_tool: Any, ws: Path) -> None:
        """edit_file replaces a unique string; missing or repeated strings are errors."""
        result = call_tool(
            tools, "edit_file", {"path": "notes.txt", "old": "\nbeta\n", "new": "\nB\n"}
        )
        assert result.output == "replaced 1 occurrence in notes.txt"
        assert (ws / "notes.txt").read_text() == "alpha\nB\nalpha beta\n"
        missing = call_tool(tools, "edit_file", {"path": "notes.txt", "old": "zeta", "new": ""})
        assert missing.output == (
            "old string not found in 'notes.txt'; read the file and copy it exactly"
        )
        repeated = call_tool(tools, "edit_file", {"path": "notes.txt", "old": "alpha", "new": ""})
        assert repeated.output == (
            "old string occurs 2 times in 'notes.txt'; include more surrounding text so that "
            "it is unique"
        )
        assert (ws / "notes.txt").read_text() == "alpha\nB\nalpha beta\n"

    def test_read_huge_file(self, tools: Any, call_tool: Any, ws: Path) -> None:
        """A huge file is read only in part and the result is capped with a notice."""
        (ws / "huge.txt").write_bytes(b"y" * (5 << 20))
        result = call_tool(tools, "read_file", {"path": "huge.txt"})
        assert not result.is_error
        assert result.output.endswith("[... read the first 4,194,304 bytes of 5,242,880 ...]")
        assert "[... output truncated: " in result.output

    def test_read_missing(self, tools: Any, call_tool: Any) -> None:
        """Reading a missing file says so."""
        result = call_tool(tools, "read_file", {"path": "nope.txt"})
        assert (result.is_error, result.output) == (True, "'nope.txt' does not exist")

    def test_search(self, tools: Any, call_tool: Any) -> None:
        """search prints file:line: text, skips links leaving the root, honours regex."""
        assert call_tool(tools, "search", {"pattern": "alpha"}).output == (
            "inner.txt:1: alpha\ninner.txt:3: alpha beta\n"
            "notes.txt:1: alpha\nnotes.txt:3: alpha beta"
        )
        assert call_tool(tools, "search", {"pattern": "outside"}).output == "no matches"
        assert call_tool(tools, "search", {"pattern": "^gam+a$", "regex": True}).output == (
            "sub/deep.txt:1: gamma"
        )
        bad = call_tool(tools, "search", {"pattern": "(", "regex": True})
        assert bad.output.startswith("pattern is not a valid regular expression")


class TestSearchTimeLimit:
    def test_catastrophic_pattern_is_stopped(self, ws: Path, call_tools: Any) -> None:
        """A model-chosen (a|aa)+$ on a 40-character line is stopped by search itself
        within the file timeout (its child process is killed), and the event loop runs on
        meanwhile (no frozen host)."""
        (ws / "bomb.txt").write_text("a" * 40 + "!\n")
        gaps: list[float] = []

        @tool(category="file")
        async def ticker() -> str:
            """Tick."""
            last = time.monotonic()
            for _ in range(20):
                await asyncio.sleep(0.05)
                now = time.monotonic()
                gaps.append(now - last)
                last = now
            return "ticked"

        tools = [*builtin_tools("files", workspace=ws), ticker]
        before = set(threading.enumerate())
        start = time.monotonic()
        found, ticked = call_tools(
            tools,
            [("search", {"pattern": "(a|aa)+$", "regex": True}), ("ticker", {})],
            tool_timeouts={"file": 2.0},
        )
        took = time.monotonic() - start
        assert not found.timed_out
        assert found.error == "tool_error"
        assert found.output == (
            "search stopped after 1.2 s, in bomb.txt: the pattern takes too long (nested "
            "repetition such as (a|aa)+ can take exponential time); simplify the pattern or "
            "search a smaller path"
        )
        assert took < 2.0
        assert ticked.output == "ticked"
        assert max(gaps) < 0.5
        for thread in set(threading.enumerate()) - before:  # the search's worker ends
            thread.join(1.0)
            assert not thread.is_alive()

    def test_plain_search_is_literal(self, tools: Any, call_tool: Any) -> None:
        """Without regex the pattern is literal text (regex characters included)."""
        assert call_tool(tools, "search", {"pattern": "(a|aa)+$"}).output == "no matches"


class TestShell:
    def test_runs_in_the_workspace(self, tools: Any, call_tool: Any, ws: Path) -> None:
        """run_shell starts in the root and reports exit code, stdout and stderr."""
        result = call_tool(tools, "run_shell", {"command": "pwd; echo oops >&2; exit 3"})
        assert result.output == f"exit code: 3\nstdout:\n{ws}\n\nstderr:\noops\n"
        assert (result.exit_code, result.stdout, result.stderr) == (3, f"{ws}\n", "oops\n")
        assert result.is_error

    def test_python(self, tools: Any, call_tool: Any) -> None:
        """run_python runs code in a fresh interpreter in the root."""
        result = call_tool(tools, "run_python", {"code": "import os; print(sorted(os.listdir()))"})
        assert result.output.startswith("exit code: 0\nstdout:\n['inner.txt', 'leak.txt'")

    def test_timeout_kills_the_group(self, ws: Path, call_tool: Any) -> None:
        """At the timeout the shell and its grandchildren are gone; the output so far is
        kept."""
        tools = builtin_tools("shell", workspace=ws)
        marker, line = naps()
        start = time.monotonic()
        result = call_tool(
            tools, "run_shell", {"command": f"{line}; sleep {marker}"}, tool_timeouts={"shell": 0.5}
        )
        assert time.monotonic() - start < 10  # not the 100 s its sleepers would take
        assert (result.timed_out, result.is_error) == (True, True)
        assert re.match(
            r"tool 'run_shell' timed out after \d+\.\d s \(limit 0\.5 s from category 'shell'\); "
            r"it was stopped",
            result.output,
        )
        assert result.output.endswith("output before the timeout:\nstarted\n")
        assert result.stdout == "started\n"
        assert all_gone(marker)

    def test_background_children_do_not_outlive_the_call(self, ws: Path, call_tool: Any) -> None:
        """A command that exits leaving background children returns at once; they go."""
        tools = builtin_tools("shell", workspace=ws)
        marker, line = naps()
        start = time.monotonic()
        result = call_tool(tools, "run_shell", {"command": line})
        assert time.monotonic() - start < 1.5
        assert result.exit_code == 0
        assert all_gone(marker)

    def test_run_process_timeout(self, ws: Path, gone: Any) -> None:
        """run_process's own timeout kills the group and reports timed_out with the output."""
        command = "echo begun; sleep 100 & echo $! > gc.pid; sleep 100"
        result = asyncio.run(run_process(["/bin/sh", "-c", command], cwd=ws, timeout=0.3))
        assert (result.timed_out, result.exit_code, result.stdout) == (True, -9, "begun\n")
        assert 0.3 <= result.duration < 1.3
        assert gone(int((ws / "gc.pid").read_text()))

    def test_fifty_megabytes(self, ws: Path) -> None:
        """A child printing 50 MB is captured in bounded memory with a notice."""
        result = asyncio.run(
            run_process(["/bin/sh", "-c", "head -c 50000000 /dev/zero | tr '\\0' x"], cwd=ws)
        )
        assert result.exit_code == 0
        assert len(result.stdout) < 1_100_000
        assert "[... 48,951,424 bytes of 50,000,000 not kept ...]" in result.stdout
        assert os.path.isdir(ws)
