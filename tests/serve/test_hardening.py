"""Hostile and careless clients: a clear HTTP error each, nothing lost; a client that goes
away aborts its run, which stays valid and stored."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from bench.serve import post_scope as scope
from innerloop import Harness, HarnessParams, tool
from innerloop.examples.approval import with_approval
from innerloop.serve import app
from innerloop.serve._runs import Served
from innerloop.testing import (
    FakeProvider,
    ScriptedProvider,
    assert_valid_history,
    reply,
    tool_call,
)
from tests.serve.conftest import ended, harness, leave_at, waiting_harness, weather_script

URL = "/v1/chat/completions"
ASK: Any = {"model": "m", "messages": [{"role": "user", "content": "Weather?"}]}


def post(server: Any, body: Any = None, **options: Any) -> httpx.Response:
    with httpx.Client(base_url=server.base_url) as c:
        return c.post(URL, json=body, **options)


def message(response: httpx.Response) -> str:
    return str(response.json()["error"]["message"])


def test_an_oversized_body_is_a_413(serve: Any) -> None:
    """A body over max_body_bytes is refused before the harness sees it."""
    server = serve(harness(*weather_script()), max_body_bytes=100)
    big = ASK | {"messages": [{"role": "user", "content": "x" * 200}]}
    response = post(server, big)
    assert response.status_code == 413
    assert message(response) == "request body of 255 bytes: at most 100 are read"


def test_a_chunked_oversized_body_is_a_413(serve: Any) -> None:
    """A body with no Content-Length is counted as it arrives."""
    server = serve(harness(*weather_script()), max_body_bytes=100)
    with httpx.Client(base_url=server.base_url) as c:
        response = c.post(URL, content=iter([b"{" + b" " * 80, b" " * 80 + b"}"]))
    assert response.status_code == 413
    assert "at most 100 are read" in message(response)


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"{not json", "request body is not JSON"),
        (b"[1, 2]", "request body: one JSON object is wanted"),
        (b'{"messages": []}', "messages: a non-empty list"),
        (b'{"messages": [{"role": "assistant", "content": "hi"}]}', "must be the user's"),
        (b'{"messages": [{"role": "user", "content": 3}]}', "messages[0].content"),
        (
            b'{"messages": [{"role": "tool", "content": "x"}, {"role": "user", "content": "y"}]}',
            "messages[0].role",
        ),
        (
            b'{"messages": [{"role": "user", "content": "y"}], "tools": [{"type": "function"}]}',
            "runs its own tools",
        ),
        (
            b'{"messages": [{"role": "user", "content": "y"}], "conversation_id": 7}',
            "conversation_id is a string",
        ),
    ],
)
def test_a_bad_request_is_a_400_saying_what_to_send(serve: Any, content: bytes, says: str) -> None:
    """Bad JSON, a wrong shape: a 400 whose message names the fix."""
    server = serve(harness())
    with httpx.Client(base_url=server.base_url) as c:
        response = c.post(URL, content=content)
    assert response.status_code == 400
    assert says in message(response)


def test_an_unknown_conversation_with_a_token_is_a_404(serve: Any) -> None:
    """A token for a conversation this server does not hold (restarted without a store)."""
    first = serve(harness(reply("Hi.")), secret=b"kept")
    token = post(first, ASK | {"conversation_id": "c1"}).json()["conversation_token"]
    second = serve(harness(), secret=b"kept")
    response = post(second, ASK | {"conversation_id": "c1", "conversation_token": token})
    assert response.status_code == 404
    assert message(response).startswith("unknown conversation 'c1'")


def test_a_token_is_needed_off_loopback(serve: Any) -> None:
    """With a token every request wants it as a bearer; the openai SDK sends its api_key."""
    server = serve(harness(*weather_script()), token="s3cret")
    assert post(server, ASK).status_code == 403
    assert "bearer token missing or wrong" in post(server, ASK).text
    wrong = post(server, ASK, headers={"Authorization": "Bearer guess"})
    assert wrong.status_code == 403
    with openai.OpenAI(api_key="s3cret", base_url=f"{server.base_url}/v1", max_retries=0) as c:
        done = c.chat.completions.create(**ASK)
    assert done.choices[0].message.content == "Sunny in Lisbon."


def test_another_host_name_is_refused(serve: Any) -> None:
    """DNS rebinding: a request naming a host that is not this server's is a 403."""
    server = serve(harness())
    response = post(server, ASK, headers={"Host": "evil.example"})
    assert response.status_code == 403
    assert "host 'evil.example' refused" in response.text


def test_a_second_message_while_one_runs_is_a_409(serve: Any) -> None:
    """One message at a time per conversation; a suspended one wants its answer first."""
    h = harness(reply(tool_call("weather", {"city": "Oslo"})), machine=with_approval())
    server = serve(h)
    first = post(server, ASK | {"conversation_id": "c"}).json()
    assert first["innerloop"]["final_state"] == "suspended"
    again = post(
        server, ASK | {"conversation_id": "c", "conversation_token": first["conversation_token"]}
    )
    assert again.status_code == 409
    assert "its last message is suspended on a 'approval' interrupt" in message(again)


def test_an_approval_is_answered_through_innerloop_resume(serve: Any) -> None:
    """The run suspends on an approval; innerloop_resume answers it and the run goes on."""
    h = harness(*weather_script(), machine=with_approval())
    with openai.OpenAI(api_key="x", base_url=f"{serve(h).base_url}/v1", max_retries=0) as c:
        asked = c.chat.completions.create(**ASK, extra_body={"conversation_id": "c"})
        extra: Any = asked.model_extra
        interrupt = extra["innerloop"]["interrupt"]
        assert interrupt["kind"] == "approval"
        assert [(c["name"], c["input"]) for c in interrupt["payload"]["calls"]] == [
            ("weather", {"city": "Lisbon"})
        ]
        assert asked.choices[0].message.content == (
            "[the run waits for an answer to its 'approval' interrupt]"
        )
        done = c.chat.completions.create(
            **ASK,
            extra_body={
                "conversation_id": "c",
                "conversation_token": extra["conversation_token"],
                "innerloop_resume": True,
            },
        )
    assert done.choices[0].message.content == "Sunny in Lisbon."


def test_a_client_going_away_aborts_its_run_which_stays_stored(serve: Any, tmp_path: Path) -> None:
    """The stream's reader leaves while a tool runs: the run is aborted, its history valid."""
    h = waiting_harness(tmp_path / "s.db")
    server = serve(h)
    body = ASK | {"stream": True, "conversation_id": "gone", "innerloop_events": True}
    state = leave_at(server, URL, body, '"type":"tool_use_complete"', "gone", h)
    assert state.final_state == "aborted"
    assert state.abort is not None
    assert state.abort.reason == "the client went away"
    assert_valid_history(state.history)


def test_a_server_without_a_store_keeps_the_latest_conversations(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In memory, the oldest conversation goes when more than IN_MEMORY are held."""
    from innerloop.serve import _runs

    monkeypatch.setattr(_runs, "IN_MEMORY", 2)
    served = _runs.Served(harness())
    tokens = {cid: served.conversation(cid, None).token for cid in ("a", "b", "c")}
    with pytest.raises(_runs.Refused, match="unknown conversation 'a'") as refused:
        served.conversation("a", tokens["a"])
    assert refused.value.status == 404
    assert served.conversation("c", tokens["c"]).new is False


def test_a_body_that_never_finishes_arriving_is_a_408(serve: Any) -> None:
    """Slow-loris: a body still short of its Content-Length after body_seconds."""
    import socket

    server = serve(harness(), body_seconds=0.2)
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"mod'
        )
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
            chunk = sock.recv(4096)
            if not chunk:
                break
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 408")
    assert b"request body not received within 0.2 s" in answer


def test_the_models_list_names_the_served_harness(serve: Any) -> None:
    """GET /v1/models: the one model served, by its name."""
    with openai.OpenAI(
        api_key="x", base_url=f"{serve(harness(), name='weather').base_url}/v1", max_retries=0
    ) as c:
        assert [m.id for m in c.models.list()] == ["weather"]


async def leave_before_the_stream(application: Any, path: str, body: dict[str, Any]) -> None:
    """One request to ``application`` (in process) whose client goes away before the
    answer's first byte: the response's start is never sent (the socket does not take it)
    and the client's disconnect is all the server hears after the body."""
    request = {"type": "http.request", "body": json.dumps(body).encode(), "more_body": False}
    messages = [request]

    async def receive() -> dict[str, Any]:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        assert message["type"] == "http.response.start"
        await asyncio.Event().wait()  # a socket that never takes the bytes: cancelled

    await application(scope(path), receive, send)


def user_parts(text: str) -> list[dict[str, Any]]:
    return [{"id": "u", "role": "user", "parts": [{"type": "text", "text": text}]}]


GONE_BEFORE_THE_STREAM = [
    ("/v1/chat/completions", ASK | {"stream": True, "conversation_id": "early"}),
    (
        "/ag-ui",
        {
            "threadId": "early",
            "runId": "r",
            "messages": [{"id": "m", "role": "user", "content": "Weather?"}],
        },
    ),
    ("/ai-sdk", {"id": "early", "messages": user_parts("Weather?")}),
]


@pytest.mark.parametrize(("path", "body"), GONE_BEFORE_THE_STREAM, ids=lambda p: str(p)[:8])
async def test_a_client_gone_before_the_stream_leaves_its_conversation_free(
    path: str, body: dict[str, Any]
) -> None:
    """The client goes away before the stream's first byte (its reader never starts):
    the run is aborted all the same, and the in-memory conversation takes its next
    message instead of answering 409 for ever."""
    h = Harness(HarnessParams(model="scripted:m"), [FakeProvider(lambda _: reply("Hello."))])
    application = app(h, secret=b"s")
    async with application.lifespan(application):  # on leaving: every run has ended
        await leave_before_the_stream(application, path, body)
    token = Served(h, b"s").token("early")
    transport = httpx.ASGITransport(app=application)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
        again = await c.post(
            URL,
            json=ASK | {"conversation_id": "early", "conversation_token": token},
        )
    assert again.status_code == 200, again.text
    assert again.json()["choices"][0]["message"]["content"] == "Hello."
    assert again.json()["innerloop"]["exit_reason"] == "model_complete"


async def test_a_stored_run_left_before_the_stream_is_aborted_valid(tmp_path: Path) -> None:
    """With a store: the run whose client left before the first byte is stored aborted,
    its history valid; the conversation goes on."""
    h = waiting_harness(tmp_path / "s.db")
    application = app(h)
    async with application.lifespan(application):
        await leave_before_the_stream(
            application, URL, ASK | {"stream": True, "conversation_id": "x"}
        )
    state = h.checkpoint("x").state
    assert state.final_state == "aborted"
    assert state.abort is not None
    assert state.abort.reason == "the client went away"
    assert_valid_history(state.history)


def test_a_quiet_stream_sends_a_comment_and_its_events_go_out_together(
    serve: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a tool runs and the run says nothing, the stream sends a comment each
    PING_SECONDS (a proxy keeps it open); what was ready before went out at once."""
    from innerloop.serve import _runs

    monkeypatch.setattr(_runs, "PING_SECONDS", 0.05)
    h = waiting_harness(tmp_path / "s.db")
    server = serve(h)
    body = ASK | {"stream": True, "conversation_id": "quiet", "innerloop_events": True}
    seen = []
    with httpx.Client(base_url=server.base_url) as c, c.stream("POST", URL, json=body) as r:
        for line in r.iter_lines():
            seen.append(line)
            if line == ": ping":
                break
    events = [json.loads(line[6:]) for line in seen if line.startswith("data: ")]
    kinds = [e["innerloop_event"]["type"] for e in events if "innerloop_event" in e]
    assert "tool_use_complete" in kinds  # all before the wait, then the comment
    state = ended(h, "quiet")
    assert state.final_state == "aborted"


async def test_the_events_ready_at_once_go_out_in_one_write() -> None:
    """A run that ends at once: its dozen events reach the socket in a few writes."""
    h = Harness(HarnessParams(model="scripted:m"), [FakeProvider(lambda _: reply("Hello."))])
    application = app(h)
    writes: list[bytes] = []
    request = {"type": "http.request", "body": json.dumps(ASK | {"stream": True}).encode()}
    messages: list[Any] = [request]

    async def receive() -> Any:
        return messages.pop(0) if messages else await asyncio.Event().wait()

    async def send(message: Any) -> None:
        if message["type"] == "http.response.body":
            writes.append(message["body"])

    await application(scope(URL), receive, send)
    events = b"".join(writes).count(b"data: ")
    assert events >= 4
    assert len([w for w in writes if w]) < events


async def test_a_client_gone_while_its_whole_answer_runs_aborts_the_run(tmp_path: Path) -> None:
    """A request not streamed (its run goes on without making events): the client goes
    away while a tool runs, and the run is aborted, valid and stored."""
    entered = asyncio.Event()

    @tool
    async def slow(reason: str) -> str:
        """Waits until cancelled."""
        entered.set()
        await asyncio.Event().wait()
        return "never"

    script = [reply("Waiting.", tool_call("slow", {"reason": "test"}))]
    h = Harness(
        HarnessParams(model="scripted:m", tools=[slow]),
        [ScriptedProvider(script)],
        checkpointer=f"sqlite:///{tmp_path / 's.db'}",
    )
    application = app(h)
    body = json.dumps(ASK | {"conversation_id": "whole"}).encode()
    messages: list[Any] = [{"type": "http.request", "body": body}]
    sent: list[Any] = []

    async def receive() -> Any:
        if messages:
            return messages.pop(0)
        await entered.wait()  # the tool runs: now the client goes
        return {"type": "http.disconnect"}

    async def send(message: Any) -> None:
        sent.append(message)

    async with application.lifespan(application):
        await application(scope(URL), receive, send)
    assert sent[0]["status"] == 499
    state = h.checkpoint("whole").state
    assert state.final_state == "aborted"
    assert_valid_history(state.history)


async def test_a_client_gone_before_its_body_is_whole_is_let_go() -> None:
    """A body cut off by the client leaving: no run starts, and no error is raised (the
    server would log it as a failure of its own)."""
    h = Harness(HarnessParams(model="scripted:m"), [FakeProvider(lambda _: reply("Hello."))])
    application = app(h)
    messages: list[Any] = [
        {"type": "http.request", "body": b'{"model": "m", "mess', "more_body": True},
        {"type": "http.disconnect"},
    ]
    sent: list[Any] = []

    async def receive() -> Any:
        return messages.pop(0)

    async def send(message: Any) -> None:
        sent.append(message)

    await application(scope(URL), receive, send)
    assert sent[0]["status"] == 499
    assert h.providers["scripted"].requests == []  # type: ignore[attr-defined]
