"""Built-in tools, enabled by named set:

- ``files``: read_file, write_file, edit_file, list_dir, search (category ``file``)
- ``shell``: run_shell (category ``shell``)
- ``python``: run_python (category ``code``)
- ``tasks``: tasks, the model's pending-task list (``state.tasks``)

File tools are confined to the workspace root (see :class:`Workspace`). ``run_shell`` and
``run_python`` start in the root with an environment scrubbed of secrets and are killed,
with every process they started, at their timeout; they are not a sandbox: a command can
still name paths outside the root.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Literal

from innerloop.tools._define import tool
from innerloop.tools._process import ProcessResult, run_process, scrub_env
from innerloop.tools._spec import ToolContext, ToolError, ToolOutput, ToolSpec
from innerloop.tools._workspace import Workspace

__all__ = ["BUILTIN_SETS", "builtin_tools"]

BUILTIN_SETS = ("files", "shell", "python", "tasks")

READ_LIMIT = 4 << 20
"""read_file reads at most this many bytes (the runner caps the result further)."""


def _file_tools(ws: Workspace) -> list[ToolSpec]:
    def existing_file(path: str) -> Path:
        target = ws.resolve(path)
        if not target.exists():
            raise ToolError(f"{path!r} does not exist")
        if not target.is_file():
            raise ToolError(f"{path!r} is not a file")
        return target

    @tool(category="file")
    def read_file(path: str) -> str:
        """Read a text file in the workspace.

        Args:
            path: file path relative to the workspace root
        """
        target = existing_file(path)
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
        target = existing_file(path)
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

    @tool(category="file")
    def list_dir(path: str = ".") -> str:
        """List a directory of the workspace; directories end with '/'.

        Args:
            path: directory path relative to the workspace root
        """
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

    @tool(category="file")
    def search(pattern: str, path: str = ".", regex: bool = False, max_results: int = 100) -> str:
        """Search text files of the workspace for a string; prints 'file:line: text'.

        Args:
            pattern: the text to find (a Python regular expression when regex is true)
            path: file or directory to search, relative to the workspace root
            regex: treat pattern as a regular expression
            max_results: stop after this many matching lines
        """
        try:
            matcher = re.compile(pattern if regex else re.escape(pattern))
        except re.error as exc:
            raise ToolError(f"pattern is not a valid regular expression: {exc}") from None
        hits: list[str] = []
        for file in _walk(ws, ws.resolve(path)):
            try:
                with file.open(encoding="utf-8", errors="strict") as fh:
                    for number, line in enumerate(fh, 1):
                        if matcher.search(line):
                            hits.append(f"{ws.relative(file)}:{number}: {line.rstrip()}")
                            if len(hits) >= max_results:
                                return "\n".join([*hits, f"[stopped at {max_results} results]"])
            except (UnicodeDecodeError, OSError):
                continue  # binary or unreadable
        return "\n".join(hits) or "no matches"

    return [read_file, write_file, edit_file, list_dir, search]


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


def _process_tools(ws: Workspace, env: Mapping[str, str], sets: tuple[str, ...]) -> list[ToolSpec]:
    specs: list[ToolSpec] = []

    async def run(argv: list[str], ctx: ToolContext) -> ToolOutput:
        result = await run_process(argv, cwd=ws.root, env=env, on_partial=ctx.keep_partial)
        return _process_output(result)

    if "shell" in sets:

        @tool(category="shell")
        async def run_shell(command: str, ctx: ToolContext) -> ToolOutput:
            """Run a shell command (/bin/sh) in the workspace root; returns its exit code,
            stdout and stderr. It is killed, with everything it started, at its timeout.

            Args:
                command: the shell command line
            """
            return await run(["/bin/sh", "-c", command], ctx)

        specs.append(run_shell)
    if "python" in sets:

        @tool(category="code")
        async def run_python(code: str, ctx: ToolContext) -> ToolOutput:
            """Run a Python program in a fresh interpreter in the workspace root; returns
            its exit code, stdout and stderr. Print what you want to see.

            Args:
                code: the program's source
            """
            return await run([sys.executable, "-I", "-c", code], ctx)

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
    env: Mapping[str, str] | None = None,
) -> tuple[ToolSpec, ...]:
    """The built-in tools of the named ``sets`` (``files``, ``shell``, ``python``,
    ``tasks``; none named means all), bound to ``workspace``.

    ``env`` is the environment of shell and python tools; it defaults to this process's
    environment with secrets removed (:func:`scrub_env`).
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
        child_env = dict(env) if env is not None else scrub_env(os.environ)
        specs += _process_tools(ws, child_env, chosen)
    if "tasks" in chosen:
        specs.append(_task_tool())
    return tuple(specs)
