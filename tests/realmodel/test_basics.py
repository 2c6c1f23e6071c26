"""The basics against a real server (llama-cpp-python serving SmolLM2-135M), through the
real openai SDK and innerloop's public API: a streamed answer, an abort mid-stream, the
model id the server reports, a server killed mid-run."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

from innerloop import Harness, HarnessParams
from innerloop.events import TextDelta
from innerloop.local import LocalModelServer
from innerloop.providers import OpenAIProvider
from innerloop.testing import FakeClock, assert_valid_history

# a long answer, so a test that acts on the first delta acts while the model still writes
LONG = "Count from 1 to 300, one number per line."


def harness(server: LocalModelServer, max_output_tokens: int) -> tuple[Harness, OpenAIProvider]:
    provider = OpenAIProvider(base_url=server.base_url)
    params = HarnessParams(
        model=f"openai:{server.model}",
        temperature=0.0,
        max_output_tokens=max_output_tokens,
        max_turns=3,
    )
    return Harness(params, [provider], clock=FakeClock()), provider


async def test_a_plain_answer_streams_and_completes(llama_server: LocalModelServer) -> None:
    """A short answer arrives as text deltas, ends model_complete, and records the model
    id the server reports."""
    h, provider = harness(llama_server, max_output_tokens=32)
    run = h.start("Reply with one word: hello.")
    deltas = [e.text async for e in run.events() if isinstance(e, TextDelta)]
    await provider.aclose()
    state = run.state
    assert state.exit_reason == "model_complete", state.diagnostic
    assert deltas
    assert "".join(deltas) == state.history[-1].text
    assert state.history[-1].text.strip()
    assert state.resolved_models == [llama_server.model]
    assert_valid_history(state.history)


async def test_abort_mid_stream_leaves_a_valid_history(llama_server: LocalModelServer) -> None:
    """The host aborts at the first text delta: the run ends aborted, its history valid."""
    h, provider = harness(llama_server, max_output_tokens=256)
    run = h.start(LONG)
    async for event in run.events():
        if isinstance(event, TextDelta):
            run.abort("the host has seen enough")
    await provider.aclose()
    assert run.state.exit_reason == "aborted"
    assert_valid_history(run.state.history)


async def test_a_server_killed_mid_run_leaves_a_valid_history(
    start_llama_server: Callable[..., LocalModelServer],
) -> None:
    """The server is killed (SIGKILL, by its pid) at the first text delta: the run fails
    with a diagnostic, its history valid."""
    server = start_llama_server()
    h, provider = harness(server, max_output_tokens=256)
    run = h.start(LONG)
    pid = server.pid
    assert pid is not None
    async for event in run.events():
        if isinstance(event, TextDelta) and server.pid is not None:
            os.kill(pid, signal.SIGKILL)
            server.stop()  # reaps it: nothing listens on its port any more
    await provider.aclose()
    state = run.state
    assert state.final_state == "failed", state.exit_reason
    assert state.diagnostic
    assert_valid_history(state.history)
