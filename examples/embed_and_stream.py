"""Embed the loop in a host and stream its events: the host reads each typed event as it
comes (text as it streams, tool calls, transitions) and matches on it.

    python examples/embed_and_stream.py
"""

from __future__ import annotations

import asyncio

from innerloop import Harness, HarnessParams, tool
from innerloop.events import (
    Finished,
    RunEvent,
    RunStarted,
    TextDelta,
    ToolExecuted,
    ToolUseStart,
    Transition,
)
from innerloop.providers import AnthropicProvider
from innerloop.testing import AnthropicServer, reply, tool_call


@tool(category="network")
async def weather(city: str) -> str:
    """Current weather for a city."""
    return f"sunny, 24 C in {city}"


def show(event: RunEvent, path: list[str]) -> str | None:
    """What the host prints of one event (None: nothing)."""
    match event:
        case RunStarted(machine=machine, state=state):
            return f"[{machine} from {state}]"
        case TextDelta(text=text):
            return text
        case ToolUseStart(name=name):
            return f"\n[calling {name}]"
        case ToolExecuted(name=name, output=output, is_error=failed):
            return f"\n[{name} {'failed' if failed else 'gave'} {output!r}]\n"
        case Transition(target=target):
            path.append(target)
            return None
        case Finished(exit_reason=reason, turns=turns, usage=usage):
            return f"\n{reason} after {turns} turns, {usage.total_tokens} tokens"
    return None


async def main() -> None:
    script = [
        reply(tool_call("weather", {"city": "Lisbon"}, id="w1")),
        reply("It is sunny in Lisbon."),
    ]
    with AnthropicServer(script) as server:
        provider = AnthropicProvider("sk-ant-test", base_url=server.base_url)
        params = HarnessParams(model="anthropic:claude-sonnet-4-5-20250929", tools=[weather])
        run = Harness(params, [provider]).start("Weather in Lisbon?")
        path: list[str] = []
        async for event in run.events():
            line = show(event, path)
            if line is not None:
                print(line, end="", flush=True)
    print("\npath:", " -> ".join(path))


if __name__ == "__main__":
    asyncio.run(main())
