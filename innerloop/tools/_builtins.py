"""Built-in tools, enabled by named set:

- ``files``: read_file, write_file, edit_file, list_dir, search (category ``file``)
- ``shell``: run_shell (category ``shell``)
- ``python``: run_python (category ``code``)
- ``tasks``: tasks, the model's pending-task list (``state.tasks``)

File tools are confined to the workspace root (see :class:`Workspace`); ``search`` runs
its pattern with a time limit. ``run_shell`` and ``run_python`` run in a
:class:`~innerloop.tools.Sandbox` (bubblewrap when it works here, else a subreaper with an
allowlisted environment) and are killed, with every process they started, at their
timeout.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import attrs

from innerloop.tools._define import tool
from innerloop.tools._process import ProcessResult
from innerloop.tools._sandbox import Sandbox, _Prepared
from innerloop.tools._spec import ToolContext, ToolError, ToolOutput, ToolSpec
from innerloop.tools._workspace import Workspace

__all__ = ["BUILTIN_SETS", "builtin_tools"]

BUILTIN_SETS = ("files", "shell", "python", "tasks")

READ_LIMIT = 4 << 20
"""read_file reads at most this many bytes (the runner caps the result further)."""

SEARCH_SHARE = 0.6
"""The share of its call's time limit a regular-expression ``search`` may spend matching.
The pattern runs in a child process (``python -I -S``), killed at that point, so a
catastrophic pattern such as ``(a|aa)+$`` really stops and never holds this process's
GIL; the search then says where it was stuck. A plain-text search is a substring test,
linear in the text, and runs in place."""


def _file_tools(ws: Workspace) -> list[ToolSpec]:
    @tool(category="file")
    def read_file(path: str) -> str:
        """Read a text file in the workspace.

        Args:
            path: file path relative to the workspace root
        """
        target = _existing_file(ws, path)
        size = target.stat().st_size
        with target.open("rb") as fh:
            data = fh.read(READ_LIMIT)
        text = data.decode("utf-8", errors="replace")
        if size > READ_LIMIT:
            text += f"\n[... read the first {READ_LIMIT:,} bytes of {size:,} ...]"
        return text

    @tool(category="file")
    def write_file(path: str, content: str) -> str:
        """Create or overwrite a text file in the workspace (parent directories are created).

        Args:
            path: file path relative to the workspace root
            content: the whole new content of the file
        """
        target = ws.resolve(path)
        if target.is_dir():
            raise ToolError(f"{path!r} is a directory")
        target.parent.mkdir(parents=True, exist_ok=True)
        data = content.encode("utf-8")
        target.write_bytes(data)
        return f"wrote {len(data)} bytes to {ws.relative(target)}"

    @tool(category="file")
    def edit_file(path: str, old: str, new: str) -> str:
        """Replace one exact occurrence of a string in a file.

        Args:
            path: file path relative to the workspace root
            old: the exact text to replace; it must occur exactly once in the file
            new: the replacement text
        """
        return _replace_once(ws, path, old, new)

    @tool(category="file")
    def list_dir(path: str = ".") -> str:
        """List a directory of the workspace; directories end with '/'.

        Args:
            path: directory path relative to the workspace root
        """
        return _listing(ws, path)

    @tool(category="file")
    def search(
        pattern: str,
        ctx: ToolContext,
        path: str = ".",
        regex: bool = False,
        max_results: int = 100,
    ) -> str:
        """Search text files of the workspace for a string; prints 'file:line: text'.

        Args:
            pattern: the text to find (a Python regular expression when regex is true)
            path: file or directory to search, relative to the workspace root
            regex: treat pattern as a regular expression
            max_results: stop after this many matching lines
        """
        return _search(ws, pattern, path, regex, max_results, ctx.timeout)

    return [read_file, write_file, edit_file, list_dir, search]


def _existing_file(ws: Workspace, path: str) -> Path:
    target = ws.resolve(path)
    if not target.exists():
        raise ToolError(f"{path!r} does not exist")
    if not target.is_file():
        raise ToolError(f"{path!r} is not a file")
    return target


def _replace_once(ws: Workspace, path: str, old: str, new: str) -> str:
    target = _existing_file(ws, path)
    text = target.read_text(encoding="utf-8")
    if not old:
        raise ToolError("old must not be empty")
    count = text.count(old)
    if count == 0:
        raise ToolError(f"old string not found in {path!r}; read the file and copy it exactly")
    if count > 1:
        raise ToolError(
            f"old string occurs {count} times in {path!r}; include more surrounding text "
            "so that it is unique"
        )
    target.write_text(text.replace(old, new, 1), encoding="utf-8")
    return f"replaced 1 occurrence in {ws.relative(target)}"


def _listing(ws: Workspace, path: str) -> str:
    target = ws.resolve(path)
    if not target.is_dir():
        raise ToolError(f"{path!r} is not a directory")
    names = []
    for entry in sorted(target.iterdir(), key=lambda p: p.name):
        if entry.is_symlink() and not ws.contains(entry):
            names.append(f"{entry.name} -> (outside the workspace)")
        else:
            names.append(entry.name + ("/" if entry.is_dir() else ""))
    return "\n".join(names) or "(empty)"


def _walk(ws: Workspace, top: Path) -> Iterator[Path]:
    if top.is_file():
        yield top
        return
    for folder, dirs, files in os.walk(top):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            file = Path(folder) / name
            if ws.contains(file):
                yield file


def _search(
    ws: Workspace,
    pattern: str,
    path: str,
    is_regex: bool,
    max_results: int,
    limit: float | None,
) -> str:
    files = list(_walk(ws, ws.resolve(path)))
    if is_regex:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ToolError(f"pattern is not a valid regular expression: {exc}") from None
        budget = None if limit is None else limit * SEARCH_SHARE
        hits, stuck = _search_in_child(ws, pattern, files, max_results, budget)
        if stuck is not None:
            raise ToolError(
                f"search stopped after {budget or 0:.1f} s, in {stuck}: the pattern "
                "takes too long (nested repetition such as (a|aa)+ can take exponential "
                "time); simplify the pattern or search a smaller path"
            )
    else:
        hits = []
        for file in files:
            for number, line in _lines(file):
                if pattern in line:
                    hits.append((ws.relative(file), number, line))
                    if len(hits) >= max_results:
                        break
            if len(hits) >= max_results:
                break
    shown = [f"{name}:{number}: {line.rstrip()}" for name, number, line in hits]
    if len(hits) >= max_results:
        shown.append(f"[stopped at {max_results} results]")
    return "\n".join(shown) or "no matches"


def _lines(file: Path) -> Iterator[tuple[int, str]]:
    """The numbered lines of a UTF-8 text file; none for a binary or unreadable one."""
    try:
        with file.open(encoding="utf-8", errors="strict") as fh:
            yield from enumerate(fh, 1)
    except (UnicodeDecodeError, OSError):
        return


_SEARCH_CHILD = r"""
import json, re, sys
request = json.load(sys.stdin)
pattern, found = re.compile(request["pattern"]), 0
for name, path in request["files"]:
    print(json.dumps(["file", name]), flush=True)
    try:
        with open(path, encoding="utf-8", errors="strict") as fh:
            for number, line in enumerate(fh, 1):
                if pattern.search(line):
                    print(json.dumps(["hit", name, number, line]), flush=True)
                    found += 1
                    if found >= request["max"]:
                        sys.exit(0)
    except (UnicodeDecodeError, OSError):
        continue
"""


def _search_in_child(
    ws: Workspace, pattern: str, files: list[Path], max_results: int, budget: float | None
) -> tuple[list[tuple[str, int, str]], str | None]:
    """Match ``pattern`` in a child process killed after ``budget`` seconds: the hits,
    and the file it was stuck in when it was killed (or None)."""
    request = {
        "pattern": pattern,
        "files": [(ws.relative(f), str(f)) for f in files],
        "max": max_results,
    }
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-S", "-c", _SEARCH_CHILD],
            input=json.dumps(request).encode(),
            capture_output=True,
            timeout=budget,
            check=False,
        )
        printed, stuck = done.stdout, None
    except subprocess.TimeoutExpired as exc:  # the child was killed
        printed, stuck = exc.stdout or b"", "(nothing yet)"
    hits: list[tuple[str, int, str]] = []
    for raw in printed.decode("utf-8", "replace").splitlines():
        try:
            record = json.loads(raw)
        except ValueError:
            break  # the last line, cut by the kill
        if record[0] == "file":
            stuck = record[1] if stuck is not None else None
        else:
            hits.append((record[1], record[2], record[3]))
    return hits, stuck


def _process_output(result: ProcessResult) -> ToolOutput:
    parts = [f"exit code: {result.exit_code}"]
    if result.stdout:
        parts.append(f"stdout:\n{result.stdout}")
    if result.stderr:
        parts.append(f"stderr:\n{result.stderr}")
    return ToolOutput(
        "\n".join(parts),
        is_error=result.exit_code != 0,
        stdout=result.stdout,
        stderr=result.stderr,
        exit_code=result.exit_code,
    )


def _process_tools(sandbox: _Prepared, sets: tuple[str, ...]) -> list[ToolSpec]:
    specs: list[ToolSpec] = []

    async def run(argv: list[str], ctx: ToolContext, tool: str) -> ToolOutput:
        result = await sandbox.run(argv, on_partial=ctx.keep_partial)
        output = _process_output(result)
        limit = sandbox.over_limit(result)
        if limit is None:
            return output
        said = f"{tool}: the command went over {limit}"
        return attrs.evolve(output, content=f"{said}\n{output.content}", is_error=True)

    if "shell" in sets:

        @tool(category="shell")
        async def run_shell(command: str, ctx: ToolContext) -> ToolOutput:
            """Run a shell command (/bin/sh) in the workspace root; returns its exit code,
            stdout and stderr. It is killed, with everything it started, at its timeout.

            Args:
                command: the shell command line
            """
            return await run(["/bin/sh", "-c", command], ctx, "run_shell")

        specs.append(run_shell)
    if "python" in sets:

        @tool(category="code")
        async def run_python(code: str, ctx: ToolContext) -> ToolOutput:
            """Run a Python program in a fresh interpreter in the workspace root; returns
            its exit code, stdout and stderr. Print what you want to see.

            Args:
                code: the program's source
            """
            return await run([sys.executable, "-I", "-c", code], ctx, "run_python")

        specs.append(run_python)
    return specs


def _task_tool() -> ToolSpec:
    @tool(category="file")
    def tasks(
        action: Literal["add", "complete", "list"],
        ctx: ToolContext,
        text: str | None = None,
        id: str | None = None,
    ) -> str:
        """Keep the list of pending tasks: add a task, complete one by id, or list them.
        The run can end once every task is complete.

        Args:
            action: 'add' (needs text), 'complete' (needs id) or 'list'
            text: the new task, for 'add'
            id: the task id (e.g. 't1'), for 'complete'
        """
        from innerloop._tasks import Task

        pending = ctx.state.tasks
        if action == "add":
            if not text:
                raise ToolError("action 'add' needs text")
            new = Task(f"t{len(pending) + 1}", text)
            pending.append(new)
        elif action == "complete":
            found = next((t for t in pending if t.id == id), None)
            if found is None:
                known = ", ".join(t.id for t in pending) or "none"
                raise ToolError(f"no task with id {id!r}; known ids: {known}")
            found.done = True
        lines = [f"[{'x' if t.done else ' '}] {t.id}: {t.text}" for t in pending]
        left = sum(not t.done for t in pending)
        return "\n".join([*lines, f"{left} of {len(pending)} tasks open"])

    return tasks


def builtin_tools(
    *sets: str,
    workspace: str | os.PathLike[str] | Workspace | None = None,
    sandbox: Sandbox | None = None,
) -> tuple[ToolSpec, ...]:
    """The built-in tools of the named ``sets`` (``files``, ``shell``, ``python``,
    ``tasks``; none named means all), bound to ``workspace``.

    ``sandbox`` confines ``run_shell`` and ``run_python`` (default ``Sandbox()``:
    bubblewrap when it works here, else the ``process`` fallback with a
    :class:`~innerloop.tools.SandboxWarning`). It is resolved here, once: a sandbox that
    cannot be set up as asked raises :class:`~innerloop.tools.SandboxError` now.
    """
    chosen = tuple(dict.fromkeys(sets or BUILTIN_SETS))
    unknown = [s for s in chosen if s not in BUILTIN_SETS]
    if unknown:
        raise ValueError(
            f"unknown built-in tool set {unknown[0]!r}; choose from {', '.join(BUILTIN_SETS)}"
        )
    specs: list[ToolSpec] = []
    needs_root = [s for s in chosen if s != "tasks"]
    if needs_root:
        if workspace is None:
            raise ValueError(f"the {needs_root[0]!r} tools need workspace=<directory>")
        ws = workspace if isinstance(workspace, Workspace) else Workspace(Path(workspace))
        if "files" in chosen:
            specs += _file_tools(ws)
        if "shell" in chosen or "python" in chosen:
            prepared = (sandbox or Sandbox()).prepare(ws.root)
            specs += _process_tools(prepared, chosen)
    if "tasks" in chosen:
        specs.append(_task_tool())
    return tuple(specs)
