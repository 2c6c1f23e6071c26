"""Provider-layer cost per streamed event on Amazon Bedrock vs the SDK's own Bedrock stream.

The same AWS event-stream body (Messages API events in ``chunk`` messages) is served by the
loopback Bedrock runtime in one write, to a SigV4-signing ``AsyncAnthropicBedrock``:

- innerloop AnthropicProvider on that client (botocore's ``EventStreamBuffer`` splits the
  frames, innerloop's assembler reads the events)
- the SDK's ``messages.stream`` and ``messages.create(stream=True)`` on the same client
  (botocore's buffer and its JSON event parser, then the SDK's event objects)

Run: ``PYTHONPATH=. /work/main/.venv/bin/python bench/bedrock.py [--events 4000] [--rounds 7]``
Target: <= 0.5x the SDK's ``messages.stream`` (the stream bench's target for Anthropic).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
from typing import Any

from anthropic import AsyncAnthropicBedrock
from stream import _drain, _time  # bench/stream.py: the same timing and draining

from innerloop.providers import AnthropicProvider, WireRequest
from innerloop.testing import BedrockServer, Raw, reply, tool_call
from innerloop.testing._bedrock import BEDROCK_VERSION, EVENT_STREAM, chunk_message

MODEL = "anthropic.claude-sonnet-4-5-20250929-v1:0"


def _body(events: int) -> tuple[bytes, int]:
    """An event-stream body with about ``events`` chunks: text in 4-char deltas plus a
    tool call."""
    server = BedrockServer(chunk_size=4)
    text = "word " * (events * 4 // 5)
    frames = server.frames(reply(text, tool_call("echo", {"x": "y" * 40})), "bench-model")
    data = [f.split(b"data: ", 1)[1].rstrip(b"\n") for f in frames]
    return b"".join(chunk_message(d) for d in data), len(data)


async def bench(events: int, rounds: int) -> dict[str, float]:
    body, frames = _body(events)
    payload: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 1024,
        "messages": [{"role": "user", "content": "go"}],
    }
    extra = {"extra_body": {"anthropic_version": BEDROCK_VERSION}}
    step = Raw(200, (("content-type", EVENT_STREAM),), body)
    with BedrockServer([step] * (3 * (rounds + 1))) as server:
        client = AsyncAnthropicBedrock(
            aws_access_key=server.access_key,
            aws_secret_key=server.secret_key,
            aws_region=server.region,
            base_url=server.url,
            max_retries=0,
        )
        provider = AnthropicProvider(client=client, name="bedrock")
        request = WireRequest("anthropic", MODEL, {**payload, "stream": True})
        ours = functools.partial(_drain, provider, request)

        async def sdk_stream() -> None:
            async with client.messages.stream(**payload, **extra) as s:  # type: ignore[arg-type]
                async for _ in s:
                    pass

        async def sdk_create() -> None:
            s = await client.messages.create(**payload, **extra, stream=True)  # type: ignore[call-overload]
            async for _ in s:
                pass

        result = {
            "innerloop": await _time(rounds, ours),
            "messages.stream": await _time(rounds, sdk_stream),
            "messages.create(stream=True)": await _time(rounds, sdk_create),
        }
        await client.close()
    return {k: v / frames * 1e6 for k, v in result.items()}


def main(events: int, rounds: int) -> int:
    result = asyncio.run(bench(events, rounds))
    print("bedrock: µs per streamed event (median of rounds)")
    for name, us in result.items():
        print(f"  {name:<40} {us:8.2f} µs")
    ratio = result["innerloop"] / result["messages.stream"]
    ok = ratio <= 0.5
    print(f"  ratio innerloop / messages.stream: {ratio:.3f}x (target <= 0.5x: ", end="")
    print("met)" if ok else "MISSED)")
    return 0 if ok else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    raise SystemExit(main(args.events, args.rounds))
