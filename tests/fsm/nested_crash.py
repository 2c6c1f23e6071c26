"""One process of the nested kill -9 test (run with ``python -m``).

python -m tests.fsm.nested_crash start DB ANTHROPIC_URL OPENAI_URL CALLS_FILE
    a parent (SQLite checkpoints) whose ``survey`` state fans out one ``web`` child per
    city, one at a time; each child calls ``lookup`` (which appends its city to
    CALLS_FILE), then answers. The test holds one child's answer and kills this process.
python -m tests.fsm.nested_crash resume DB ANTHROPIC_URL OPENAI_URL CALLS_FILE
    a new process resumes the stored parent; prints the end of the run as JSON.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from innerloop import Child, Harness, HarnessParams, tool
from innerloop.fsm import DEFAULT_SPEC, StateSpec, fan_out_handler, with_child_state
from innerloop.providers import AnthropicProvider, OpenAIProvider

RUN_ID = "nested-crash"
CITIES = "Lisbon\nPorto\nFaro"


def harness(db: str, anthropic_url: str, openai_url: str, calls: Path) -> Harness[Any]:
    @tool
    async def lookup(city: str) -> str:
        """Look a city's weather up."""
        with calls.open("a") as f:
            f.write(city + "\n")
        return f"{city} is sunny"

    web = Child(
        "web",
        HarnessParams(model="openai:gpt-4o-2024-08-06", tools=[lookup]),
        providers={"openai": OpenAIProvider("sk-proj-crash-0123456789", base_url=openai_url)},
    )
    spec = with_child_state(
        DEFAULT_SPEC,
        StateSpec("survey", doc="one web agent per city, one at a time"),
        fan_out_handler(web, lambda s: s.history[-1].text.splitlines(), limit=1),
        source="idle",
        target="assemble",
        on_failure="failed",
    ).renamed("nested_crash")
    return Harness(
        HarnessParams(model="anthropic:claude-sonnet-4-5-20250929"),
        [AnthropicProvider("sk-ant-api03-crash-0123456789", base_url=anthropic_url)],
        machine=spec,
        checkpointer=f"sqlite:///{db}",
    )


def main(mode: str, db: str, anthropic_url: str, openai_url: str, calls: str) -> None:
    h = harness(db, anthropic_url, openai_url, Path(calls))
    if mode == "start":
        h.start(CITIES, run_id=RUN_ID).run_sync()
        return
    state = h.resume(RUN_ID).run_sync()
    out = {
        "exit_reason": state.exit_reason,
        "outputs": [c["output"] for c in state.notes["children"]["web"]],
        "answer": state.history[-1].text,
        "left": state.notes.get("children.runs"),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main(*sys.argv[1:])
