"""Many clients streaming at once from one served harness: each client's stream is whole
and its own (bench/serve.py runs 200 and times the server's event loop; here 20, untimed)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from a2a.client import ClientConfig, create_client
from a2a.helpers.proto_helpers import get_artifact_text, get_message_text, new_text_message
from a2a.types import Role, SendMessageRequest, TaskState
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from starlette.applications import Starlette
from starlette.routing import Mount

from bench.serve import (
    PROTOCOLS,
    Floor,
    answer_for,
    asgi_call,
    concurrent_streams,
    harness,
    latency_requests,
    paced_harness,
    plain_streams,
    post_raw,
    sdk_floors,
    sse_data,
    stream_problems,
)
from innerloop.serve import app
from tests.serve.conftest import Server


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_twenty_streams_at_once_are_each_whole_and_unmixed(serve: Any, protocol: str) -> None:
    """20 conversations stream at once (a delta each millisecond, so their events
    interleave in the server): every client gets all of its own answer, in order, and no
    event of another conversation."""
    server = serve(paced_harness(0.001))
    assert await concurrent_streams(server.base_url, protocol, 20, "t") == []


async def test_the_plain_sse_app_replays_a_kept_stream_in_its_writes() -> None:
    """The bench's yardstick: a served stream kept, then streamed again by the plain app
    to several clients at once: the same bytes, in the writes it was served in."""
    served = app(paced_harness(0.001))
    floor = Floor(served, served, 0.001)
    with Server(floor) as server:
        assert await concurrent_streams(server.base_url, "ai-sdk", 1, "k") == []
        await post_raw(server.base_url, "/bench/keep/ai-sdk", {})
        status, kept = await post_raw(server.base_url, "/bench/kept/ai-sdk", {})
        assert await plain_streams(server.base_url, "ai-sdk", 3) == []
    assert status == 200
    assert stream_problems("ai-sdk", 0, "k", sse_data(kept)) == []
    writes = floor.kept["/ai-sdk"]
    assert writes[0]["type"] == "http.response.start"
    assert b"".join(m["body"] for m in writes[1:]) == kept


async def test_the_app_alone_answers_each_timed_route_in_process() -> None:
    """The bench's in-process figure times whole runs: each route's call answers 200 and
    its answer, the run's last event included."""
    served = app(harness())
    async with served.lifespan(served):
        for path, body in latency_requests().values():
            sent = await asgi_call(served, path, body())
            assert sent[0]["status"] == 200
            answer = b"".join(m.get("body", b"") for m in sent[1:])
            assert b"Hello." in answer
            assert not sent[-1].get("more_body")


def test_a_lost_or_mixed_event_is_seen() -> None:
    """The check itself: a stream missing a delta, or holding another client's, fails."""

    def chunk(text: str, conversation: str = "t-1") -> str:
        delta = {"index": 0, "delta": {"content": text}, "finish_reason": None}
        return json.dumps({"id": "x", "conversation_id": conversation, "choices": [delta]})

    whole = answer_for(1)
    assert stream_problems("openai", 1, "t", [chunk(whole), "[DONE]"]) == []
    lost = stream_problems("openai", 1, "t", [chunk(whole[:8]), chunk(whole[16:]), "[DONE]"])
    assert len(lost) == 1
    assert lost[0].startswith("client 1 (openai): text 'c1.0 c1.")
    mixed = stream_problems("openai", 1, "t", [chunk(whole), chunk("", "t-2"), "[DONE]"])
    assert mixed == ["client 1 (openai): events of conversations ['t-2']"]
    cut = stream_problems("openai", 1, "t", [chunk(whole)])
    assert cut == ["client 1 (openai): the stream did not end with [DONE]"]


def test_an_a2a_stream_is_read_whole() -> None:
    """The A2A check: the working statuses' text, the answer as the artifact, the task
    completed at the end, every update of the client's own context and request."""

    def update(kind: str, context: str = "t-1", request: int = 1, **fields: Any) -> str:
        result = {kind: {"taskId": "k", "contextId": context, **fields}}
        return json.dumps({"jsonrpc": "2.0", "id": request, "result": result})

    def working(text: str, context: str = "t-1") -> str:
        message = {"role": "ROLE_AGENT", "parts": [{"text": text}]}
        status = {"state": "TASK_STATE_WORKING", "message": message}
        return update("statusUpdate", context, status=status)

    whole = answer_for(1)
    artifact = update("artifactUpdate", artifact={"parts": [{"text": whole}]})
    done = update("statusUpdate", status={"state": "TASK_STATE_COMPLETED"})
    started = update("task", status={"state": "TASK_STATE_SUBMITTED"})
    assert stream_problems("a2a", 1, "t", [started, working(whole), artifact, done]) == []
    lost = stream_problems("a2a", 1, "t", [started, working(whole[8:]), artifact, done])
    assert lost == [f"client 1 (a2a): text {whole[8:]!r}, expected {whole!r}"]
    mixed = stream_problems(
        "a2a", 1, "t", [started, working(whole), working("", "t-2"), artifact, done]
    )
    assert mixed == ["client 1 (a2a): events of conversations ['t-2']"]
    other = update("statusUpdate", request=2, status={"state": "TASK_STATE_WORKING"})
    assert stream_problems("a2a", 1, "t", [started, working(whole), other, artifact, done]) == [
        "client 1 (a2a): answers of other requests"
    ]
    assert stream_problems("a2a", 1, "t", [started, working(whole), done]) == [
        "client 1 (a2a): the answer's artifact is ''"
    ]
    assert stream_problems("a2a", 1, "t", [started, working(whole), artifact]) == [
        "client 1 (a2a): no completed task at the end"
    ]


def _with_sdk_floors(url: str, pause: float = 0.0) -> Starlette:
    """The served harness at ``url`` with the bench's SDK floors at ``/bench/sdk``, as the
    bench's server mounts them (``pause``: the paced harness's and floor's)."""
    served = app(paced_harness(pause) if pause else harness(), public_url=url)
    floors, floors_lifespan = sdk_floors(f"{url}/bench/sdk", pause)

    @contextlib.asynccontextmanager
    async def lifespan(application: Any) -> AsyncIterator[None]:
        async with served.lifespan(application), floors_lifespan(floors):
            yield

    return Starlette(routes=[Mount("/bench/sdk", floors), Mount("/", served)], lifespan=lifespan)


def _a2a_seen(responses: list[Any]) -> list[tuple[str, int, str]]:
    """What an A2A client saw of a task: each response's kind, its task state and text."""
    seen = []
    for response in responses:
        kind = response.WhichOneof("payload")
        if kind == "status_update":
            update = response.status_update
            seen.append((kind, update.status.state, get_message_text(update.status.message)))
        elif kind == "artifact_update":
            seen.append((kind, 0, get_artifact_text(response.artifact_update.artifact)))
        elif kind == "task":
            task = response.task
            seen.append((kind, task.status.state, "".join(map(get_artifact_text, task.artifacts))))
        else:
            seen.append((kind or "", 0, ""))
    return seen


async def test_the_sdk_floors_answer_as_the_served_harness_does() -> None:
    """The bench's yardstick for MCP and A2A (each SDK's own server answering at once):
    through the official clients, the same tool result, the same task updates."""
    with Server(_with_sdk_floors) as server:
        results = []
        for path in ("/mcp", "/bench/sdk/mcp"):
            async with (
                streamable_http_client(f"{server.base_url}{path}") as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                results.append(await session.call_tool("innerloop", {"prompt": "Hi"}))
        assert results[0].content == results[1].content
        assert [r.is_error for r in results] == [False, False]
        completed, working = TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_WORKING
        for streaming, expected in (
            (False, [("task", completed, "Hello.")]),
            (
                True,
                [
                    ("task", TaskState.TASK_STATE_SUBMITTED, ""),
                    ("status_update", working, ""),
                    ("status_update", working, "Hello."),
                    ("artifact_update", 0, "Hello."),
                    ("status_update", completed, ""),
                ],
            ),
        ):
            seen = []
            for path in ("/a2a", "/bench/sdk/a2a"):
                client = await create_client(
                    f"{server.base_url}{path}", ClientConfig(streaming=streaming)
                )
                try:
                    message = new_text_message("Hi", role=Role.ROLE_USER)
                    request = SendMessageRequest(message=message)
                    seen.append(_a2a_seen([r async for r in client.send_message(request)]))
                finally:
                    await client.close()
            assert seen == [expected, expected]


def _paced_with_sdk_floors(url: str) -> Starlette:
    return _with_sdk_floors(url, pause=0.001)


async def test_the_a2a_sdk_floor_streams_what_the_served_agent_streams() -> None:
    """The bench's yardstick for A2A's concurrent streams: the SDK's own server, paced as
    the harness, streams each client its answer, checked whole as the served ones are."""
    with Server(_paced_with_sdk_floors) as server:
        assert await concurrent_streams(server.base_url, "a2a", 5, "served") == []
        assert await concurrent_streams(server.base_url, "a2a", 5, "f", prefix="/bench/sdk") == []
        wrong = await concurrent_streams(server.base_url, "a2a", 1, "w", prefix="/bench/sdk/x")
    assert wrong == ["client 0 (a2a): HTTP 404 Not Found"]
