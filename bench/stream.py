"""Provider-layer cost per streamed event vs the SDKs' own stream iteration.

Each contender reads the same recorded-style SSE body from a loopback server (sent in one
write, so the server costs next to nothing) and consumes every event:

- innerloop AnthropicProvider vs anthropic ``messages.stream`` (and ``create(stream=True)``)
- innerloop OpenAIProvider vs openai ``chat.completions.create(stream=True)``
- innerloop OpenAIResponsesProvider vs openai ``responses.stream`` (and
  ``responses.create(stream=True)``)

Run: ``PYTHONPATH=. /tmp/v/bin/python bench/stream.py [--events 4000] [--rounds 7]``
Targets: <= 0.5x anthropic messages.stream, <= 0.25x openai create(stream=True),
<= 0.5x openai responses.stream.

Typed output streamed: the same again over a typed answer (a JSON object of about the same
size), as native text and as a ``final_result`` call's input; the contender
``innerloop + output_delta`` feeds every event to the ``PartialOutput`` the ``stream`` state
runs (the partial parse, ``OutputDelta`` when it changed) and is held to the same targets.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import statistics
import time
from collections.abc import Awaitable, Callable

import anthropic
import openai

from innerloop.fsm._output import PartialOutput
from innerloop.providers import (
    AnthropicProvider,
    OpenAIProvider,
    OpenAIResponsesProvider,
    Provider,
    WireRequest,
)
from innerloop.testing import (
    AnthropicServer,
    LoopbackServer,
    OpenAIServer,
    Raw,
    ResponsesServer,
    reply,
    tool_call,
)

KEY = "sk-bench-0000000000000000"
SSE = (("content-type", "text/event-stream"),)


def _answer(size: int) -> dict[str, object]:
    """A typed answer whose JSON text is about ``size`` bytes."""
    entry = {"name": "item", "score": 1.5, "note": "a few words of text"}
    return {"title": "a report", "items": [entry] * max(1, size // 64)}


def _body(
    server_cls: type[LoopbackServer], events: int, typed: str | None = None
) -> tuple[bytes, int]:
    """An SSE body with about ``events`` frames: text in 4-char deltas plus a tool call;
    ``typed``: a typed answer instead, as text (``native``) or a final-result call
    (``tool``)."""
    server = server_cls(chunk_size=4)
    if typed == "native":
        step = reply(json.dumps(_answer(events * 4)))
    elif typed == "tool":
        step = reply(tool_call("final_result", _answer(events * 4)))
    else:
        step = reply("word " * (events * 4 // 5), tool_call("echo", {"x": "y" * 40}))
    frames = server.frames(step, "bench-model")
    return b"".join(frames), len(frames)


async def _time(rounds: int, once: Callable[[], Awaitable[None]]) -> float:
    await once()  # warm up: connection setup, imports, caches
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        await once()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


async def _drain(provider: Provider, request: WireRequest) -> None:
    """One call through innerloop's provider, every event read."""
    stream = await provider.open(request)
    async for _ in stream:
        pass
    await stream.aclose()


async def _drain_typed(provider: Provider, request: WireRequest, typed: str) -> None:
    """As :func:`_drain`, each event also fed to the typed answer's follower (as the
    ``stream`` state does), every ``OutputDelta`` kept."""
    partial = PartialOutput(text=typed == "native", tool=typed == "tool")
    deltas = []
    stream = await provider.open(request)
    async for event in stream:
        delta = partial.feed(event)
        if delta is not None:
            deltas.append(delta)
    deltas.append(partial.finish())
    await stream.aclose()
    assert len(deltas) > 10, "the typed answer streamed as output deltas"


async def bench_anthropic(events: int, rounds: int, typed: str | None = None) -> dict[str, float]:
    body, frames = _body(AnthropicServer, events, typed)
    payload = {
        "model": "bench-model",
        "max_tokens": 1024,
        "messages": [{"role": "user", "content": "go"}],
    }
    with AnthropicServer([Raw(200, SSE, body)] * (4 * (rounds + 1))) as server:
        provider = AnthropicProvider(KEY, base_url=server.base_url)
        client = anthropic.AsyncAnthropic(api_key=KEY, base_url=server.base_url, max_retries=0)
        request = WireRequest("anthropic", "bench-model", {**payload, "stream": True})

        ours = functools.partial(_drain, provider, request)

        async def sdk_stream() -> None:
            async with client.messages.stream(**payload) as s:  # type: ignore[arg-type]
                async for _ in s:
                    pass

        async def sdk_create() -> None:
            s = await client.messages.create(**payload, stream=True)  # type: ignore[call-overload]
            async for _ in s:
                pass

        result = {
            "innerloop": await _time(rounds, ours),
            **await _typed(rounds, provider, request, typed),
            "messages.stream": await _time(rounds, sdk_stream),
            "messages.create(stream=True)": await _time(rounds, sdk_create),
        }
        await provider.aclose()
        await client.close()
    return {k: v / frames * 1e6 for k, v in result.items()}


async def bench_openai(events: int, rounds: int, typed: str | None = None) -> dict[str, float]:
    body, frames = _body(OpenAIServer, events, typed)
    payload = {
        "model": "bench-model",
        "messages": [{"role": "user", "content": "go"}],
        "stream_options": {"include_usage": True},
    }
    with OpenAIServer([Raw(200, SSE, body)] * (3 * (rounds + 1))) as server:
        provider = OpenAIProvider(KEY, base_url=server.base_url)
        client = openai.AsyncOpenAI(api_key=KEY, base_url=server.base_url, max_retries=0)
        request = WireRequest("openai", "bench-model", {**payload, "stream": True})

        ours = functools.partial(_drain, provider, request)

        async def sdk_create() -> None:
            s = await client.chat.completions.create(**payload, stream=True)  # type: ignore[call-overload]
            async for _ in s:
                pass

        result = {
            "innerloop": await _time(rounds, ours),
            **await _typed(rounds, provider, request, typed),
            "chat.completions.create(stream=True)": await _time(rounds, sdk_create),
        }
        await provider.aclose()
        await client.close()
    return {k: v / frames * 1e6 for k, v in result.items()}


async def bench_responses(events: int, rounds: int, typed: str | None = None) -> dict[str, float]:
    body, frames = _body(ResponsesServer, events, typed)
    payload = {"model": "bench-model", "input": "go", "store": False}
    with ResponsesServer([Raw(200, SSE, body)] * (4 * (rounds + 1))) as server:
        provider = OpenAIResponsesProvider(KEY, base_url=server.base_url)
        client = openai.AsyncOpenAI(api_key=KEY, base_url=server.base_url, max_retries=0)
        request = WireRequest("responses", "bench-model", {**payload, "stream": True})

        ours = functools.partial(_drain, provider, request)

        async def sdk_stream() -> None:
            async with client.responses.stream(**payload) as s:  # type: ignore[call-overload]
                async for _ in s:
                    pass

        async def sdk_create() -> None:
            s = await client.responses.create(**payload, stream=True)  # type: ignore[call-overload]
            async for _ in s:
                pass

        result = {
            "innerloop": await _time(rounds, ours),
            **await _typed(rounds, provider, request, typed),
            "responses.stream": await _time(rounds, sdk_stream),
            "responses.create(stream=True)": await _time(rounds, sdk_create),
        }
        await provider.aclose()
        await client.close()
    return {k: v / frames * 1e6 for k, v in result.items()}


async def _typed(
    rounds: int, provider: Provider, request: WireRequest, typed: str | None
) -> dict[str, float]:
    if typed is None:
        return {}
    once = functools.partial(_drain_typed, provider, request, typed)
    return {"innerloop + output_delta": await _time(rounds, once)}


def _report(title: str, result: dict[str, float], baseline: str, target: float) -> bool:
    print(f"{title}: µs per streamed event (median of rounds)")
    for name, us in result.items():
        print(f"  {name:<40} {us:8.2f} µs")
    ours = "innerloop + output_delta" if "innerloop + output_delta" in result else "innerloop"
    ratio = result[ours] / result[baseline]
    ok = ratio <= target
    verdict = "met" if ok else "MISSED"
    print(f"  ratio {ours} / {baseline}: {ratio:.3f}x (target <= {target}x: {verdict})")
    return ok


async def main(events: int, rounds: int, typed: bool) -> int:
    ok = True
    for kind in (None, "native", "tool") if typed else (None,):
        title = "" if kind is None else f", typed answer ({kind})"
        a = await bench_anthropic(events, rounds, kind)
        o = await bench_openai(events, rounds, kind)
        r = await bench_responses(events, rounds, kind)
        ok = _report(f"anthropic{title}", a, "messages.stream", 0.5) and ok
        ok = _report(f"openai{title}", o, "chat.completions.create(stream=True)", 0.25) and ok
        ok = _report(f"openai responses{title}", r, "responses.stream", 0.5) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument(
        "--no-typed", action="store_true", help="skip the typed-answer (output_delta) rounds"
    )
    args = parser.parse_args()
    raise SystemExit(asyncio.run(main(args.events, args.rounds, not args.no_typed)))
