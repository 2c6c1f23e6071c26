"""One process of the nested-interrupt test (run with ``python -m``).

python -m tests.fsm.nested_process start URL
    a parent whose ``clean`` state runs a child on the approval machine; the child asks
    to approve a call, so the parent suspends; prints the parent's interrupt as JSON.
python -m tests.fsm.nested_process resume URL
    a new process resumes the stored parent with ``answer=True``: the answer lands in the
    child, which runs the call and answers; prints the end of the run as JSON.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from innerloop import Child, Harness, HarnessParams, tool
from innerloop.examples import with_approval
from innerloop.fsm import DEFAULT_SPEC, StateSpec, child_handler, with_child_state
from innerloop.testing import ScriptedProvider, reply, tool_call

RUN_ID = "nested-1"


@tool
async def delete_file(path: str) -> str:
    """Delete a file."""
    return f"deleted {path}"


def harness(mode: str, url: str) -> Harness[Any]:
    """The same harness in both processes; only the scripted answers still to come differ."""
    first = mode == "start"
    kid = ScriptedProvider(
        [reply(tool_call("delete_file", {"path": "build.log"}, id="k1"))]
        if first
        else [reply("Deleted build.log.")],
        name="kid",
    )
    cleaner = Child(
        "cleaner",
        HarnessParams(model="kid:m", tools=[delete_file]),
        machine=with_approval(),
        providers={"kid": kid},
    )
    spec = with_child_state(
        DEFAULT_SPEC,
        StateSpec("clean", doc="a cleaner agent, whose calls a person approves"),
        child_handler(cleaner),
        source="idle",
        target="assemble",
        on_failure="failed",
    ).renamed("nested_clean")
    parent = ScriptedProvider([] if first else [reply("build.log is gone.")])
    return Harness(HarnessParams(model="scripted:m"), [parent], machine=spec, checkpointer=url)


def main(mode: str, url: str) -> None:
    h = harness(mode, url)
    if mode == "start":
        state = h.start("Remove build.log", run_id=RUN_ID).run_sync()
        asked = state.interrupt
        assert asked is not None
        out: dict[str, Any] = {
            "exit_reason": state.exit_reason,
            "kind": asked.kind,
            "state": asked.state,
            "payload": asked.payload,
        }
    else:
        state = h.resume(RUN_ID, answer=True).run_sync()
        out = {
            "exit_reason": state.exit_reason,
            "history": [m.text for m in state.history],
            "child": state.notes["children"]["cleaner"],
            "suspended_left": state.notes.get("children.runs"),
        }
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
