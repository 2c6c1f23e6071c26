"""The sync facade with prebuilt SDK clients: ``run_sync`` again and again on one harness,
on every route, with no socket left behind; ``with harness:`` shares one event loop; the
clients the providers built are closed, a user's client is left open and usable."""

from __future__ import annotations

import asyncio
import gc
import os
import re
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import attrs
import pytest
from anthropic import AsyncAnthropic, AsyncAnthropicBedrock, AsyncAnthropicVertex
from openai import AsyncAzureOpenAI, AsyncOpenAI

from innerloop import Event, Harness, HarnessParams, Message
from innerloop.lowlevel import build_request
from innerloop.providers import AnthropicProvider, OpenAIProvider, OpenAIResponsesProvider
from innerloop.providers._base import Provider
from innerloop.providers._normalize import RequestSettings
from innerloop.testing import (
    AnthropicServer,
    BedrockServer,
    OpenAIServer,
    ResponsesServer,
    reply,
)
from innerloop.testing._servers import LoopbackServer

CLAUDE = "claude-sonnet-4-5-20250929"
VERTEX_PATH = (
    "/v1/projects/proj-1/locations/us-east5/publishers/anthropic/models/"
    "claude-sonnet-4-5@20250929:streamRawPredict"
)


@attrs.frozen
class Route:
    """A server serving one cloud route, and the user's client and provider for it."""

    server: Callable[[list[Any]], LoopbackServer]
    client: Callable[[Any], Any]
    provider: Callable[[Any], Provider]
    model: str


def _bedrock_client(server: BedrockServer) -> AsyncAnthropicBedrock:
    return AsyncAnthropicBedrock(
        aws_access_key=server.access_key,
        aws_secret_key=server.secret_key,
        aws_region=server.region,
        base_url=server.url,
        max_retries=0,
    )


def _azure_client(server: LoopbackServer) -> AsyncAzureOpenAI:
    return AsyncAzureOpenAI(
        api_key="azure-key-0123456789",
        api_version="2024-10-21",
        azure_endpoint=server.url,
        max_retries=0,
    )


ROUTES = {
    "anthropic": Route(
        AnthropicServer,
        lambda s: AsyncAnthropic(api_key="sk-ant-sync", base_url=s.base_url, max_retries=0),
        lambda c: AnthropicProvider(client=c),
        f"anthropic:{CLAUDE}",
    ),
    "chat-completions": Route(
        OpenAIServer,
        lambda s: AsyncOpenAI(api_key="sk-sync", base_url=s.base_url, max_retries=0),
        lambda c: OpenAIProvider(client=c),
        "openai:gpt-4o-mini-2024-07-18",
    ),
    "responses": Route(
        ResponsesServer,
        lambda s: AsyncOpenAI(api_key="sk-sync", base_url=s.base_url, max_retries=0),
        lambda c: OpenAIResponsesProvider(client=c),
        "openai:gpt-5-2025-08-07",
    ),
    "bedrock": Route(
        BedrockServer,
        _bedrock_client,
        lambda c: AnthropicProvider(client=c, name="bedrock"),
        "bedrock:anthropic.claude-sonnet-4-5-20250929-v1:0",
    ),
    "vertex": Route(
        lambda script: AnthropicServer(script, path=VERTEX_PATH),
        lambda s: AsyncAnthropicVertex(
            region="us-east5",
            project_id="proj-1",
            access_token="ya29.vertex-token",
            base_url=s.url + "/v1",
            max_retries=0,
        ),
        lambda c: AnthropicProvider(client=c, name="vertex"),
        "vertex:claude-sonnet-4-5@20250929",
    ),
    "azure": Route(
        lambda script: OpenAIServer(script, path="/openai/deployments/my-gpt/chat/completions"),
        _azure_client,
        lambda c: OpenAIProvider(client=c, name="azure"),
        "azure:my-gpt",
    ),
}


def client_sockets(port: int) -> int:
    """This process's open TCP sockets connected to ``port``: the client ends of the
    connections to a loopback server (the server's own ends have it as local port)."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed meanwhile (the listing's own fd)
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as rows:
            next(rows)
            for row in rows:
                fields = row.split()
                if int(fields[2].rsplit(":", 1)[1], 16) == port and fields[9] in inodes:
                    count += 1
    return count


@contextmanager
def no_resource_warning() -> Iterator[None]:
    """Fails when the block (or a collection at its end) warns of an unclosed resource."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
        gc.collect()
    leaks = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert leaks == []


def _forget(held: list[Any]) -> None:
    """Drop the last references to what ``held`` holds, and collect."""
    held.clear()
    gc.collect()


def _use_after_close(client: Any, provider: Any, model: str) -> None:
    """The user's client still carries a request, on a loop of the user's own; then the
    user closes it there."""

    async def go() -> None:
        try:
            assert not client.is_closed()
            name = model.partition(":")[2]
            request = build_request(
                RequestSettings(64), [Message.user("after")], provider.dialect, name
            )
            response = await provider.complete(request)
            assert response.message == Message.assistant("still open")
        finally:
            await client.close()

    asyncio.run(go())


def _expected(i: int) -> list[Message]:
    return [Message.user(f"question {i}"), Message.assistant(f"answer {i}")]


class TestPrebuiltClients:
    """``run_sync`` on a harness whose provider was given the user's SDK client."""

    @pytest.mark.parametrize("runs", [2, 3])
    @pytest.mark.parametrize("route", ROUTES)
    def test_each_run_sync_gets_a_loop_and_leaves_no_socket(self, route: str, runs: int) -> None:
        """Outside ``with``, every call completes with its exact history, its connection
        is closed when it returns, and the user's client stays open and usable."""
        r = ROUTES[route]
        script = [reply(f"answer {i}") for i in range(runs)] + [reply("still open")]
        with no_resource_warning(), r.server(script) as server:
            client = r.client(server)
            provider = r.provider(client)
            harness = Harness(HarnessParams(model=r.model), [provider])
            for i in range(runs):
                state = harness.run_sync(f"question {i}")
                assert (state.exit_reason, state.history) == ("model_complete", _expected(i))
                assert client_sockets(server.port) == 0
            _use_after_close(client, provider, r.model)
            assert len(server.requests) == runs + 1
            assert client_sockets(server.port) == 0

    @pytest.mark.parametrize("runs", [2, 3])
    @pytest.mark.parametrize("route", ROUTES)
    def test_with_block_shares_one_loop_and_one_connection(self, route: str, runs: int) -> None:
        """Inside ``with harness:``, the runs share a loop: one connection carries them
        all; it is closed at the block's end, and the user's client stays usable."""
        r = ROUTES[route]
        script = [reply(f"answer {i}") for i in range(runs)] + [reply("still open")]
        with no_resource_warning(), r.server(script) as server:
            client = r.client(server)
            provider = r.provider(client)
            with Harness(HarnessParams(model=r.model), [provider]) as harness:
                for i in range(runs):
                    state = harness.run_sync(f"question {i}")
                    assert (state.exit_reason, state.history) == ("model_complete", _expected(i))
                    assert client_sockets(server.port) == 1  # kept alive for the next run
            assert client_sockets(server.port) == 0
            _use_after_close(client, provider, r.model)
            assert client_sockets(server.port) == 0

    @pytest.mark.parametrize("route", ["anthropic", "responses", "bedrock"])
    def test_a_run_on_its_own_loop_inside_the_block(self, route: str) -> None:
        """Inside ``with``, a ``Run`` driven on a loop of its own (``run.run_sync()``, as
        after ``resume``) does not reuse the block loop's connections, and the block's
        next run does not reuse its: every run completes on its first request. A collection
        between the runs (the block's loop still open, another loop adopted since) leaves
        each loop's duty to close its connections in place."""
        r = ROUTES[route]
        script = [reply(f"answer {i}") for i in range(3)]
        with no_resource_warning(), r.server(script) as server:
            client = r.client(server)
            with Harness(HarnessParams(model=r.model), [r.provider(client)]) as harness:
                assert harness.run_sync("question 0").history == _expected(0)
                assert harness.start("question 1").run_sync().history == _expected(1)
                gc.collect()
                assert harness.run_sync("question 2").history == _expected(2)
            assert len(server.requests) == 3
            assert client_sockets(server.port) == 0
            asyncio.run(client.close())


def _built(server: LoopbackServer) -> AnthropicProvider:
    """A provider that builds its own SDK client (and so closes it)."""
    return AnthropicProvider(api_key="sk-ant-sync", base_url=server.base_url)


PARAMS = HarnessParams(model=f"anthropic:{CLAUDE}")


class TestBuiltClients:
    """``run_sync`` with the SDK client a provider built for itself."""

    def test_each_loop_closes_the_client_it_used(self) -> None:
        """Outside ``with``, the client is closed when each call returns, and built anew
        for the next one."""
        with no_resource_warning(), AnthropicServer([reply("answer 0"), reply("answer 1")]) as s:
            provider = _built(s)
            harness = Harness(PARAMS, [provider])
            clients = []
            for i in range(2):
                assert harness.run_sync(f"question {i}").history == _expected(i)
                clients.append(provider.client)
                assert provider.client.is_closed()
                assert client_sockets(s.port) == 0
        assert clients[0] is not clients[1]

    def test_close_closes_the_client_of_the_with_block(self) -> None:
        """Inside ``with``, one client serves every run; the block's end closes it."""
        with no_resource_warning(), AnthropicServer([reply("answer 0"), reply("answer 1")]) as s:
            provider = _built(s)
            with Harness(PARAMS, [provider]) as harness:
                for i in range(2):
                    assert harness.run_sync(f"question {i}").history == _expected(i)
                client = provider.client
                assert not client.is_closed()
                assert client_sockets(s.port) == 1
            assert client.is_closed()
            assert client_sockets(s.port) == 0

    def test_run_sync_after_the_block_gets_a_loop_again(self) -> None:
        """``close()`` is idempotent, and a later ``run_sync`` runs on a loop of its own."""
        with no_resource_warning(), AnthropicServer([reply("answer 0"), reply("answer 1")]) as s:
            harness = Harness(PARAMS, [_built(s)])
            with harness:
                assert harness.run_sync("question 0").history == _expected(0)
            harness.close()
            assert harness.run_sync("question 1").history == _expected(1)
            assert client_sockets(s.port) == 0

    def test_iter_sync_closes_the_client_its_loop_used(self) -> None:
        """``Run.iter_sync`` ends its private loop as ``asyncio.run`` does: the provider's
        clean-up at the loop's end runs, so no socket or pending task is left behind."""
        with no_resource_warning(), AnthropicServer([reply("answer 0")]) as s:
            provider = _built(s)
            run = Harness(PARAMS, [provider]).start("question 0")
            events = list(run.iter_sync())
            assert events[-1].type == "finished"
            assert run.state.history == _expected(0)
            assert provider.client.is_closed()
            assert client_sockets(s.port) == 0


class TestMisuse:
    """What ``run_sync`` and ``close`` refuse, each with the fix."""

    def test_run_sync_inside_a_running_loop_names_await(self) -> None:
        """Inside a running loop it raises before anything is sent, naming ``await
        harness.run(...)``."""
        with AnthropicServer([reply("answer 0")]) as server:
            harness = Harness(PARAMS, [_built(server)])

            async def go() -> None:
                harness.run_sync("question 0")

            message = (
                "Harness.run_sync was called inside a running event loop, which it would "
                "block; in async code use `await harness.run(...)` instead"
            )
            with pytest.raises(RuntimeError, match=re.escape(message)):
                asyncio.run(go())
            assert server.requests == []
            assert harness.run_sync("question 0").history == _expected(0)

    def test_close_inside_a_running_loop_says_where_to_call_it(self) -> None:
        """Closing the shared loop from inside another loop is refused, with the fix."""
        with no_resource_warning(), AnthropicServer([reply("answer 0")]) as server:
            harness = Harness(PARAMS, [_built(server)])
            harness.__enter__()
            harness.run_sync("question 0")

            async def go() -> None:
                harness.close()

            message = (
                "Harness.close() was called inside a running event loop, which it would "
                "block while its own loop closes; call it outside, or `await "
                "asyncio.to_thread(harness.close)`"
            )
            with pytest.raises(RuntimeError, match=re.escape(message)):
                asyncio.run(go())
            harness.close()
            assert client_sockets(server.port) == 0

    def test_a_nested_with_block_is_refused(self) -> None:
        """A harness opens once; the inner block is refused and the outer one still works."""
        with (
            AnthropicServer([reply("answer 0")]) as server,
            Harness(PARAMS, [_built(server)]) as harness,
        ):
            with pytest.raises(RuntimeError, match="already open"), harness:
                pass  # pragma: no cover - not entered
            assert harness.run_sync("question 0").history == _expected(0)

    def test_a_second_thread_is_refused_inside_the_block(self) -> None:
        """Inside ``with``, a ``run_sync`` from another thread while one runs is refused
        before it starts; the running one completes."""
        entered, release = threading.Event(), threading.Event()
        results: list[Any] = []

        def hold(event: Event) -> None:
            entered.set()
            release.wait(10)

        with AnthropicServer([reply("answer 0")]) as server:
            with Harness(PARAMS, [_built(server)]) as harness:

                def first() -> None:
                    results.append(harness.run_sync("question 0", on_event=hold))

                thread = threading.Thread(target=first)
                thread.start()
                assert entered.wait(10)
                try:
                    with pytest.raises(RuntimeError, match="in run_sync in another thread"):
                        harness.run_sync("question 1")
                finally:
                    release.set()
                    thread.join(10)
            assert len(server.requests) == 1
        assert [state.history for state in results] == [_expected(0)]

    def test_a_harness_collected_open_warns_and_closes_its_loop(self) -> None:
        """Collected inside its block (never closed), the harness's loop is closed by the
        collector, with a ResourceWarning naming the fix; the user's client stays usable."""
        route = ROUTES["anthropic"]
        with AnthropicServer([reply("answer 0"), reply("still open")]) as server:
            client = route.client(server)
            provider = route.provider(client)
            held = [Harness(PARAMS, [provider])]
            held[0].__enter__()
            held[0].run_sync("question 0")
            assert client_sockets(server.port) == 1
            with pytest.warns(ResourceWarning, match=re.escape("or call harness.close()")):
                _forget(held)
            assert client_sockets(server.port) == 0
            _use_after_close(client, provider, route.model)
