"""Pause, persist, resume and fork a custom machine, one step per process: the approval
machine suspends before a tool runs; a second process approves and finishes the run; a
third forks it from the checkpoint where it waited and denies the call instead.

    python examples/persist_resume_fork.py start  runs.db
    python examples/persist_resume_fork.py resume runs.db RUN_ID
    python examples/persist_resume_fork.py fork   runs.db RUN_ID
"""

from __future__ import annotations

import sys

from innerloop import Harness, HarnessParams, tool
from innerloop.examples import with_approval
from innerloop.providers import AnthropicProvider
from innerloop.testing import AnthropicServer, reply, tool_call


@tool(category="file")
async def delete_file(path: str) -> str:
    """Delete a file."""
    return f"deleted {path}"


PARAMS = HarnessParams(model="anthropic:claude-sonnet-4-5-20250929", tools=[delete_file])


def harness(db: str, server: AnthropicServer) -> Harness:
    """A harness built like the first process's: the same machine, params and store."""
    provider = AnthropicProvider("sk-ant-test", base_url=server.base_url)
    return Harness(PARAMS, [provider], machine=with_approval(), checkpointer=db)


def start(db: str) -> None:
    script = [reply(tool_call("delete_file", {"path": "build.log"}, id="c1"))]
    with AnthropicServer(script) as server, harness(db, server) as h:
        run = h.start("Remove build.log")
        state = run.run_sync()
    assert state.interrupt is not None
    calls = [c["name"] for c in state.interrupt.payload["calls"]]
    print(state.exit_reason, run.run_id, calls)


def resume(db: str, run_id: str) -> None:
    with AnthropicServer([reply("Removed build.log.")]) as server, harness(db, server) as h:
        state = h.resume(run_id, answer=True).run_sync()
        print(state.exit_reason, repr(state.history[-1].text))
        print([(c.seq, c.state) for c in h.checkpoints(run_id)][-3:])


def fork(db: str, run_id: str) -> None:
    with AnthropicServer([reply("I did not remove it.")]) as server, harness(db, server) as h:
        (waited,) = [c.seq for c in h.checkpoints(run_id) if c.state == "suspended"]
        state = h.fork(run_id, at=waited, answer=False).run_sync()
        print(state.exit_reason, repr(state.history[-1].text))
        print(sorted((r.machine, r.status, r.exit_reason or "-") for r in h.runs()))


if __name__ == "__main__":
    command, db, *rest = sys.argv[1:]
    if command == "start":
        start(db)
    elif command == "resume":
        resume(db, rest[0])
    else:
        fork(db, rest[0])
