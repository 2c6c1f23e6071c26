"""Tools through the whole loop: eager dispatch while streaming, abort during tools, the
repeated-failure notice, the task tool ending a run, huge output, max_tokens cuts."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

from innerloop import HarnessParams, Message, TextBlock, ToolResultBlock
from innerloop._events import ToolExecuted
from innerloop.testing import ScriptedProvider, history_problems, reply, tool_call
from innerloop.tools import Sandbox, Toolset, builtin_tools, tool
from innerloop.tools._runner import ABORTED_TOOL as ABORTED

# the abort tests read host pids, so the shell runs in the process sandbox (inside
# bubblewrap, $$ and $! are pids of its own namespace; test_sandbox.py covers that mode)
HOST_PIDS = Sandbox(isolation="process")


def _params(tools: Any, **kw: Any) -> HarnessParams:
    return HarnessParams(model="scripted:m", tools=tuple(tools), **kw)


def _stamp_tools(started: dict[str, float]) -> Toolset:
    tools = Toolset()

    @tools.tool
    async def stamp(tag: str) -> str:
        """Record when this call started."""
        started[tag] = time.monotonic()
        await asyncio.sleep(0.05)
        return tag

    return tools


class TestEager:
    def _run(self, make_harness: Any, paced: Any, eager: bool) -> tuple[dict[str, float], Any]:
        started: dict[str, float] = {}
        script = iter([reply(tool_call("stamp", {"tag": "a"}), "and more text"), reply("done")])
        provider = paced(lambda request: next(script), delay=0.1)
        params = _params(_stamp_tools(started), eager_tools=eager)
        state = make_harness(params, [provider]).run_sync("go")
        assert state.exit_reason == "model_complete"
        return started, provider.log

    def test_tool_starts_before_the_message_completes(self, make_harness: Any, paced: Any) -> None:
        """With eager_tools a tool starts at its tool_use_complete event, mid-stream."""
        started, log = self._run(make_harness, paced, eager=True)
        complete = next(t for kind, t in log if kind == "message_complete")
        tool_done = next(t for kind, t in log if kind == "tool_use_complete")
        assert tool_done <= started["a"] < complete

    def test_without_eager_the_tool_waits(self, make_harness: Any, paced: Any) -> None:
        """Without eager_tools the tool starts only after the message completed."""
        started, log = self._run(make_harness, paced, eager=False)
        complete = next(t for kind, t in log if kind == "message_complete")
        assert started["a"] > complete

    def test_cut_off_tool_never_runs(self, make_harness: Any) -> None:
        """A tool call cut off by max_tokens is never executed, eager or not."""
        started: dict[str, float] = {}
        provider = ScriptedProvider(
            [
                reply("partial", stop_reason="max_tokens", incomplete_tool=("stamp", '{"tag": "c')),
                reply(tool_call("stamp", {"tag": "whole"})),
                reply("done"),
            ]
        )
        params = _params(_stamp_tools(started), eager_tools=True)
        state = make_harness(params, provider).run_sync("go")
        assert state.exit_reason == "model_complete"
        assert list(started) == ["whole"]

    def test_eager_call_of_a_dropped_message_is_cancelled(
        self, make_harness: Any, paced: Any
    ) -> None:
        """A call started eagerly in a message that max_tokens cut off (and the loop
        dropped) is cancelled by the end of the run, not left running."""
        seen: list[str] = []

        @tool
        async def slow() -> str:
            """Slow."""
            seen.append("started")
            try:
                await asyncio.sleep(5)
            except asyncio.CancelledError:
                seen.append("cancelled")
                raise
            return "late"

        script = iter([reply(tool_call("slow"), "more", stop_reason="max_tokens"), reply("ok")])
        provider = paced(lambda request: next(script), delay=0.02)
        harness = make_harness(_params([slow], eager_tools=True), [provider])

        async def run_and_look() -> tuple[str | None, list[str]]:
            state = await harness.start("go").run()
            return state.exit_reason, list(seen)

        assert asyncio.run(run_and_look()) == ("model_complete", ["started", "cancelled"])


class TestAbort:
    def test_abort_kills_a_running_shell(
        self, make_harness: Any, tmp_path: Path, gone: Any
    ) -> None:
        """An abort from another thread during sleep 30 ends the run promptly, the process
        is gone and every tool_use has a result that says it was aborted."""
        command = "echo $$ > sh.pid; sleep 30 & echo $! > sleep.pid; wait"
        provider = ScriptedProvider(
            [
                reply(
                    tool_call("run_shell", {"command": command}),
                    tool_call("run_shell", {"command": "sleep 30"}),
                )
            ]
        )
        params = _params(
            builtin_tools("shell", workspace=tmp_path, sandbox=HOST_PIDS), max_parallel_tools=1
        )
        run = make_harness(params, provider).start("go")

        watcher = threading.Thread(target=self._abort_when, args=(run, tmp_path / "sleep.pid"))
        watcher.start()
        start = time.monotonic()
        state = asyncio.run(run.run())
        elapsed = time.monotonic() - start
        watcher.join()
        assert elapsed < 3.0
        assert (state.final_state, state.exit_reason) == ("aborted", "aborted")
        assert gone(int((tmp_path / "sh.pid").read_text()))
        assert gone(int((tmp_path / "sleep.pid").read_text()))
        assert history_problems(state.history) == []
        results = state.history[-1].content
        assert all(isinstance(b, ToolResultBlock) and b.is_error for b in results)
        assert [b.content for b in results] == [ABORTED, ABORTED]

    def test_finished_calls_keep_their_results(
        self, make_harness: Any, tmp_path: Path, gone: Any
    ) -> None:
        """On abort a call that had finished keeps its real result; the running one is
        marked aborted."""
        slow = "sleep 30 & echo $! > sleep.pid; wait"
        provider = ScriptedProvider(
            [
                reply(
                    tool_call("run_shell", {"command": "echo quick"}),
                    tool_call("run_shell", {"command": slow}),
                )
            ]
        )
        shell = builtin_tools("shell", workspace=tmp_path, sandbox=HOST_PIDS)
        run = make_harness(_params(shell), provider).start("go")
        watcher = threading.Thread(target=self._abort_when, args=(run, tmp_path / "sleep.pid", 0.3))
        watcher.start()
        state = asyncio.run(run.run())
        watcher.join()
        assert state.exit_reason == "aborted"
        assert history_problems(state.history) == []
        quick, aborted = state.history[-1].content
        assert isinstance(quick, ToolResultBlock)
        assert isinstance(aborted, ToolResultBlock)
        assert (quick.content, quick.is_error) == ("exit code: 0\nstdout:\nquick\n", False)
        assert (aborted.content, aborted.is_error) == (ABORTED, True)
        assert gone(int((tmp_path / "sleep.pid").read_text()))

    def test_abort_while_streaming_kills_an_eager_shell(
        self, make_harness: Any, paced: Any, tmp_path: Path, gone: Any
    ) -> None:
        """An abort mid-stream kills a shell started eagerly; the unfinished message is
        not kept, so the history stays valid."""
        command = "sleep 30 & echo $! > sleep.pid; wait"
        script = iter([reply(tool_call("run_shell", {"command": command}), "still streaming")])
        provider = paced(lambda request: next(script), delay=0.4)
        params = _params(
            builtin_tools("shell", workspace=tmp_path, sandbox=HOST_PIDS), eager_tools=True
        )
        run = make_harness(params, [provider]).start("go")
        watcher = threading.Thread(target=self._abort_when, args=(run, tmp_path / "sleep.pid"))
        watcher.start()
        state = asyncio.run(run.run())
        watcher.join()
        assert not any(kind == "message_complete" for kind, _ in provider.log)
        assert state.exit_reason == "aborted"
        assert gone(int((tmp_path / "sleep.pid").read_text()))
        assert history_problems(state.history) == []
        assert [m.role for m in state.history] == ["user"]

    @staticmethod
    def _abort_when(run: Any, path: Path, after: float = 0.0) -> None:
        # wait for the pid itself: the shell creates the file before it writes to it
        while not (path.exists() and path.read_text().strip()):
            time.sleep(0.01)
        time.sleep(after)
        run.abort("stop")


class TestFailures:
    def test_three_consecutive_failures_inject_the_notice(
        self, make_harness: Any, tmp_path: Path
    ) -> None:
        """A real tool failing three times in a row gets the notice once, as a message."""
        missing = tool_call("read_file", {"path": "missing.txt"})
        provider = ScriptedProvider([reply(missing), reply(missing), reply(missing), reply("ok")])
        params = _params(builtin_tools("files", workspace=tmp_path))
        state = make_harness(params, provider).run_sync("go")
        assert state.exit_reason == "model_complete"
        notice = TextBlock(
            "Tool read_file has failed 3 consecutive times. "
            "Proceed without it or use an alternative approach."
        )
        results = [m for m in state.history if m.role == "user"][1:]
        assert [notice in m.content for m in results] == [False, False, True]
        assert results[2].content[0] == ToolResultBlock(
            results[2].content[0].tool_use_id, "'missing.txt' does not exist", True
        )
        assert state.tool_failures == {"read_file": 3}
        assert notice.text not in params.system

    def test_bad_arguments_and_timeouts_do_not_crash_the_loop(self, make_harness: Any) -> None:
        """Invalid arguments and a timeout become error results; the run goes on."""

        @tool(timeout=0.2)
        async def slow(n: int) -> int:
            """Slow."""
            await asyncio.sleep(5)
            return n

        provider = ScriptedProvider(
            [reply(tool_call("slow", {"n": "x"}), tool_call("slow", {"n": 1})), reply("ok")]
        )
        events: list[Any] = []
        state = make_harness(_params([slow]), provider).run_sync("go", on_event=events.append)
        assert state.exit_reason == "model_complete"
        executed = [e for e in events if isinstance(e, ToolExecuted)]
        assert [(e.is_error, e.timed_out) for e in executed] == [(True, False), (True, True)]
        assert executed[0].output.startswith("invalid arguments for tool 'slow'")
        assert executed[1].output.startswith("tool 'slow' timed out after ")


class TestTasks:
    def test_completing_the_last_task_ends_the_run(self, make_harness: Any) -> None:
        """The model completes the last task through the task tool: exit tasks_complete."""
        provider = ScriptedProvider(
            [
                reply(tool_call("tasks", {"action": "add", "text": "write the summary"})),
                reply(tool_call("tasks", {"action": "complete", "id": "t1"})),
                reply(tool_call("tasks", {"action": "complete", "id": "t2"})),
            ]
        )
        params = _params(builtin_tools("tasks"))
        state = make_harness(params, provider).start("go", tasks=["read the code"])
        state = asyncio.run(state.run())
        assert (state.final_state, state.exit_reason) == ("tasks_complete", "tasks_complete")
        assert [(t.id, t.text, t.done) for t in state.tasks] == [
            ("t1", "read the code", True),
            ("t2", "write the summary", True),
        ]
        last = state.history[-1].content[0]
        assert isinstance(last, ToolResultBlock)
        assert last.content == (
            "[x] t1: read the code\n[x] t2: write the summary\n0 of 2 tasks open"
        )

    def test_unknown_task_id(self, call_tool: Any) -> None:
        """Completing an unknown id lists the known ones."""
        result = call_tool(builtin_tools("tasks"), "tasks", {"action": "complete", "id": "t9"})
        assert (result.is_error, result.output) == (True, "no task with id 't9'; known ids: none")


class TestHugeOutput:
    def test_fifty_megabytes_are_truncated_and_the_run_continues(
        self, make_harness: Any, tmp_path: Path
    ) -> None:
        """A shell printing 50 MB yields a capped result and the model gets its turn."""
        command = "head -c 50000000 /dev/zero | tr '\\0' x"
        provider = ScriptedProvider(
            [reply(tool_call("run_shell", {"command": command})), reply("ok")]
        )
        params = _params(builtin_tools("shell", workspace=tmp_path))
        state = make_harness(params, provider).run_sync("go")
        assert state.exit_reason == "model_complete"
        result = state.history[2].content[0]
        assert isinstance(result, ToolResultBlock)
        assert not result.is_error
        assert len(result.content.encode()) <= 64_000
        assert "[... output truncated: " in result.content
        assert state.history[-1] == Message("assistant", (TextBlock("ok"),))
