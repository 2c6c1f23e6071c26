"""Child processes of the crash and concurrency tests (run with ``python -m``).

python -m tests.checkpoint.child crash URL RUN_ID MODE WORKDIR COMMIT
    one run checkpointing every transition into URL, committed as COMMIT says
    (``barrier`` or ``each``); MODE ``tool`` blocks in turn 2's tool call, ``stream``
    streams turn 2's answer slowly: the test kills it with -9.
python -m tests.checkpoint.child many URL PREFIX THREADS TURNS
    THREADS runs at once, each on its own store connection; prints a JSON report.
python -m tests.checkpoint.child pay URL RUN_ID WORKDIR WHO
    resume the suspended RUN_ID approving its ``pay`` call; before claiming the
    suspension it waits (a barrier of files in WORKDIR) until the other process has come
    as far. Prints ``resumed`` or ``refused: <the error>``.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from innerloop import Harness, HarnessParams, ResumeError
from innerloop.checkpoint import open_checkpointer
from innerloop.examples import with_approval
from innerloop.providers import AnthropicProvider
from innerloop.testing import AnthropicServer, ScriptedProvider, SlowReply, reply, tool_call
from innerloop.tools import ToolContext, ToolOutput, ToolSpec

MODEL = "anthropic:claude-sonnet-4-5-20250929"
OBJ = {"type": "object"}


def crash_tools(workdir: Path) -> list[ToolSpec]:
    """``record`` logs each execution (fsynced); ``block`` hangs until ``release`` exists."""

    async def record(args: Any, ctx: ToolContext) -> ToolOutput:
        with open(workdir / "ran.log", "a") as log:  # noqa: ASYNC230 (a few bytes, fsynced)
            log.write(f"record {args['x']}\n")
            log.flush()
            os.fsync(log.fileno())
        return ToolOutput(f"recorded {args['x']}")

    async def block(args: Any, ctx: ToolContext) -> ToolOutput:
        import asyncio

        (workdir / "blocking").touch()
        while not (workdir / "release").exists():  # noqa: ASYNC110 (set by another process)
            await asyncio.sleep(0.05)
        return ToolOutput("released")

    return [
        ToolSpec("record", "Record x", OBJ, record, category="file"),
        ToolSpec("block", "Block", OBJ, block, category="code"),
    ]


def crash_script(mode: str) -> list[Any]:
    first = reply("one", tool_call("record", {"x": 1}, id="r1"))
    if mode == "tool":
        return [first, reply("two", tool_call("block", {}, id="b1")), reply("done")]
    long = reply(" ".join(f"word{i}" for i in range(400)))
    return [first, SlowReply(long, tokens_per_second=20), reply("done")]


def crash(url: str, run_id: str, mode: str, workdir: str, commit: Any) -> None:
    work = Path(workdir)
    params = HarnessParams(model=MODEL, tools=crash_tools(work))
    with AnthropicServer(crash_script(mode)) as server:
        provider = AnthropicProvider(api_key="sk-ant-test", base_url=server.base_url)
        harness = Harness(params, [provider], checkpointer=url, checkpoint_commit=commit)
        run = harness.start("go", run_id=run_id)
        (work / "started").touch()
        run.run_sync()


def pay_tools(workdir: Path) -> list[ToolSpec]:
    """``pay`` appends a line to ``paid.log`` (fsynced) each time it runs."""

    async def pay(args: Any, ctx: ToolContext) -> ToolOutput:
        with open(workdir / "paid.log", "a") as log:  # noqa: ASYNC230 (a few bytes, fsynced)
            log.write(f"paid {args['amount']}\n")
            log.flush()
            os.fsync(log.fileno())
        return ToolOutput("paid")

    return [ToolSpec("pay", "Pay an amount", OBJ, pay, category="network")]


def pay(url: str, run_id: str, workdir: str, who: str) -> None:
    work = Path(workdir)
    store = open_checkpointer(url)
    claim = store.claim

    def at_the_barrier(run: str, interrupt_id: str) -> bool:
        (work / f"ready-{who}").touch()
        deadline = time.monotonic() + 60
        while len(list(work.glob("ready-*"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.005)
        return claim(run, interrupt_id)

    store.claim = at_the_barrier  # type: ignore[method-assign,assignment]
    params = HarnessParams(model="scripted:m", tools=pay_tools(work))
    harness = Harness(
        params, [ScriptedProvider([reply("Paid.")])], machine=with_approval(), checkpointer=store
    )
    try:
        run = harness.resume(run_id, True)
    except ResumeError as exc:
        print(f"refused: {exc}")
    else:
        print(f"resumed: {run.run_sync().exit_reason}")
    store.close()


def many(url: str, prefix: str, threads: int, turns: int) -> None:
    errors: list[str] = []
    done: list[str] = []

    async def echo(args: Any, ctx: ToolContext) -> ToolOutput:
        return ToolOutput("ok")

    params = HarnessParams(
        model="scripted:m", tools=[ToolSpec("echo", "Echo", OBJ, echo)], max_turns=turns + 1
    )

    def one(i: int) -> None:
        script = [reply(tool_call("echo", {}, id=f"c{t}")) for t in range(turns)]
        try:
            store = open_checkpointer(url)
            harness = Harness(
                params, [ScriptedProvider([*script, reply("done")])], checkpointer=store
            )
            state = harness.start("go", run_id=f"{prefix}-{i}").run_sync()
            store.close()
            if state.exit_reason != "model_complete":
                errors.append(f"{prefix}-{i}: {state.exit_reason}")
            else:
                done.append(f"{prefix}-{i}")
        except Exception as exc:  # reported to the test, which fails on any
            where = traceback.extract_tb(exc.__traceback__)[-1]
            errors.append(f"{prefix}-{i}: {type(exc).__name__}: {exc} at {where.line}")

    started = time.monotonic()
    workers = [threading.Thread(target=one, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    print(json.dumps({"done": done, "errors": errors, "seconds": time.monotonic() - started}))


if __name__ == "__main__":
    command, *rest = sys.argv[1:]
    if command == "crash":
        crash(*rest)
    elif command == "pay":
        pay(*rest)
    else:
        many(rest[0], rest[1], int(rest[2]), int(rest[3]))
