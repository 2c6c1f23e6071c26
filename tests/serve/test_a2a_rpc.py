"""A2A's JSON-RPC as innerloop writes it, read raw: every result parses strictly as the
a2a-sdk's protobuf types (no field they do not know), the methods answered whole, and an
error with A2A's code and a message saying what to send for each bad request."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
from a2a.types import ListTasksResponse, SendMessageResponse, StreamResponse, Task
from google.protobuf.json_format import ParseDict

from innerloop import Harness, HarnessParams
from innerloop.examples.approval import with_approval
from innerloop.serve import app
from innerloop.testing import ScriptedProvider, assert_valid_history, reply, tool_call
from tests.serve.conftest import (
    ended,
    harness,
    wait_forever,
    waiting_harness,
    weather_script,
)
from tests.serve.test_hardening import leave_before_the_stream

VERSION = {"A2A-Version": "1.0"}


def rpc(method: str, params: Any, request_id: Any = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


def message(text: str, **ids: str) -> dict[str, Any]:
    return {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": text}]} | ids


def call(base: str, body: Any, headers: dict[str, str] | None = None) -> httpx.Response:
    with httpx.Client(base_url=base) as client:
        return client.post("/a2a", json=body, headers=VERSION if headers is None else headers)


def result(base: str, method: str, params: Any) -> dict[str, Any]:
    answer = call(base, rpc(method, params))
    assert answer.status_code == 200
    body: dict[str, Any] = answer.json()
    assert body.keys() == {"jsonrpc", "id", "result"}, body
    return body["result"]  # type: ignore[no-any-return]


def at_once(base: str, text: str, context_id: str) -> dict[str, Any]:
    """The task SendMessage answers at once (``returnImmediately``), its run going on."""
    params = {
        "message": message(text, contextId=context_id),
        "configuration": {"returnImmediately": True},
    }
    return result(base, "SendMessage", params)["task"]  # type: ignore[no-any-return]


def error(base: str, body: Any, headers: dict[str, str] | None = None) -> tuple[int, int, str]:
    """The HTTP status, the JSON-RPC code and message of a request's error."""
    answer = call(base, body, headers)
    got = answer.json()
    assert "result" not in got, got
    return answer.status_code, got["error"]["code"], got["error"]["message"]


def streamed(base: str, params: Any) -> list[dict[str, Any]]:
    """SendStreamingMessage's results, each parsed strictly as a StreamResponse."""
    results = []
    with (
        httpx.Client(base_url=base) as client,
        client.stream(
            "POST", "/a2a", json=rpc("SendStreamingMessage", params, 7), headers=VERSION
        ) as answer,
    ):
        assert answer.headers["content-type"].startswith("text/event-stream")
        for line in answer.iter_lines():
            if line.startswith("data: "):
                event = json.loads(line[len("data: ") :])
                assert (event["jsonrpc"], event["id"]) == ("2.0", 7)
                ParseDict(event["result"], StreamResponse())  # strict: no unknown field
                results.append(event["result"])
    return results


def test_a_streamed_task_is_the_task_then_its_updates(serve: Any) -> None:
    """The task (submitted), working, the text as it streams, the answer's artifact,
    completed; GetTask then gives the task whole, its history the two messages."""
    base = serve(harness(*weather_script())).base_url
    results = streamed(base, {"message": message("Weather?", contextId="c-1")})
    kinds = [next(iter(r)) for r in results]
    assert kinds == ["task", *["statusUpdate"] * 4, "artifactUpdate", "statusUpdate"]
    task = results[0]["task"]
    assert task["contextId"] == "c-1"
    assert task["status"]["state"] == "TASK_STATE_SUBMITTED"
    states = [r["statusUpdate"]["status"]["state"] for r in results if "statusUpdate" in r]
    assert states == [*["TASK_STATE_WORKING"] * 4, "TASK_STATE_COMPLETED"]
    said = [r["statusUpdate"]["status"].get("message") for r in results[1:5]]
    assert said[0] is None
    assert {m["role"] for m in said[1:]} == {"ROLE_AGENT"}
    call_id = said[1]["parts"][0]["data"]["toolCall"]["id"]
    assert [m["parts"] for m in said[1:]] == [
        [
            {
                "data": {
                    "toolCall": {"id": call_id, "name": "weather", "input": {"city": "Lisbon"}}
                },
                "mediaType": "application/json",
            }
        ],
        [
            {
                "data": {
                    "toolResult": {
                        "id": call_id,
                        "name": "weather",
                        "output": "sunny in Lisbon",
                        "isError": False,
                    }
                },
                "mediaType": "application/json",
            }
        ],
        [{"text": "Sunny in Lisbon."}],
    ]
    artifact = results[5]["artifactUpdate"]
    assert artifact["lastChunk"] is True
    assert artifact["artifact"]["parts"] == [{"text": "Sunny in Lisbon."}]
    got = result(base, "GetTask", {"id": task["id"]})
    ParseDict(got, Task())
    assert got["status"]["state"] == "TASK_STATE_COMPLETED"
    assert [(m["role"], m["parts"]) for m in got["history"]] == [
        ("ROLE_USER", [{"text": "Weather?"}]),
        ("ROLE_AGENT", [{"text": "Sunny in Lisbon."}]),
    ]
    assert all(m["taskId"] == task["id"] and m["contextId"] == "c-1" for m in got["history"])
    assert (
        result(base, "GetTask", {"id": task["id"], "historyLength": 1})["history"]
        == (got["history"][-1:])
    )
    assert "history" not in result(base, "GetTask", {"id": task["id"], "historyLength": 0})


def test_send_message_answers_the_task_once_it_ended(serve: Any) -> None:
    base = serve(harness(*weather_script())).base_url
    got = result(base, "SendMessage", {"message": message("Weather?")})
    ParseDict(got, SendMessageResponse())
    task = got["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["artifacts"][0]["parts"] == [{"text": "Sunny in Lisbon."}]


def test_an_approval_asks_for_input_and_the_next_message_answers_it(serve: Any) -> None:
    base = serve(harness(*weather_script(), machine=with_approval())).base_url
    asked = result(base, "SendMessage", {"message": message("Weather?")})["task"]
    assert asked["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    ids = {"taskId": asked["id"], "contextId": asked["contextId"]}
    answer = message("", **ids) | {"parts": [{"data": {"approve": True}}]}
    done = result(base, "SendMessage", {"message": answer})["task"]
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    assert done["artifacts"][0]["parts"] == [{"text": "Sunny in Lisbon."}]
    again = error(base, rpc("SendMessage", {"message": message("More?", **ids)}))
    assert again == (
        200,
        -32004,
        f"task {asked['id']!r} is TASK_STATE_COMPLETED: only a task waiting for input "
        "(TASK_STATE_INPUT_REQUIRED) takes another message; send one without taskId to go "
        "on with its context",
    )


def test_cancelling_a_task_waiting_for_input_refuses_its_approval(
    serve: Any, tmp_path: Path
) -> None:
    """The approval is refused and the run aborted: its history stays valid, and the
    context takes its next message."""
    h = harness(
        weather_script()[0],
        reply("Hello again."),
        machine=with_approval(),
        checkpointer=f"sqlite:///{tmp_path / 's.db'}",
    )
    base = serve(h).base_url
    asked = result(base, "SendMessage", {"message": message("Weather?", contextId="c-9")})
    cancelled = result(base, "CancelTask", {"id": asked["task"]["id"]})
    assert cancelled["status"]["state"] == "TASK_STATE_CANCELED"
    state = h.checkpoint("a2a:c-9").state  # CancelTask answered once the run ended
    assert state.final_state == "aborted"
    assert_valid_history(state.history)
    assert error(base, rpc("CancelTask", {"id": asked["task"]["id"]}))[:2] == (200, -32002)
    follow = result(base, "SendMessage", {"message": message("Hi?", contextId="c-9")})["task"]
    assert follow["status"]["state"] == "TASK_STATE_COMPLETED"
    assert follow["artifacts"][0]["parts"] == [{"text": "Hello again."}]


def test_a_task_sent_to_return_at_once_is_followed_with_get_task(
    serve: Any, tmp_path: Path
) -> None:
    h = waiting_harness(tmp_path / "s.db")
    base = serve(h).base_url
    task = at_once(base, "Wait.", "c-2")
    assert task["status"]["state"] == "TASK_STATE_SUBMITTED"
    assert result(base, "CancelTask", {"id": task["id"]})["status"]["state"] == (
        "TASK_STATE_CANCELED"
    )
    assert ended(h, "a2a:c-2").final_state == "aborted"
    assert result(base, "GetTask", {"id": task["id"]})["status"]["state"] == ("TASK_STATE_CANCELED")


def test_a_client_leaving_the_stream_aborts_the_run(serve: Any, tmp_path: Path) -> None:
    h = waiting_harness(tmp_path / "s.db")
    base = serve(h).base_url
    body = rpc("SendStreamingMessage", {"message": message("Wait.", contextId="c-3")})
    task_id = ""
    with (
        httpx.Client(base_url=base) as client,
        client.stream("POST", "/a2a", json=body, headers=VERSION) as answer,
    ):
        for line in answer.iter_lines():
            if '"task":' in line:
                task_id = json.loads(line[len("data: ") :])["result"]["task"]["id"]
            if "Waiting." in line:
                break
    state = ended(h, "a2a:c-3")
    assert state.final_state == "aborted"
    assert_valid_history(state.history)
    got = result(base, "GetTask", {"id": task_id})
    assert got["status"]["state"] == "TASK_STATE_CANCELED"
    assert got["status"]["message"]["parts"] == [
        {"text": "the client went away: the run was aborted"}
    ]


def test_list_tasks_pages_the_tasks_of_a_context(serve: Any) -> None:
    base = serve(harness(*[reply(f"Answer {n}.") for n in range(3)])).base_url
    ids = [
        result(base, "SendMessage", {"message": message(f"Q{n}", contextId="c-4")})["task"]["id"]
        for n in range(3)
    ]
    first = result(base, "ListTasks", {"contextId": "c-4", "pageSize": 2})
    ParseDict(first, ListTasksResponse())
    assert [t["id"] for t in first["tasks"]] == ids[::-1][:2]
    assert (first["totalSize"], first["pageSize"], first["nextPageToken"]) == (3, 2, "2")
    assert "artifacts" not in first["tasks"][0]
    rest = result(
        base,
        "ListTasks",
        {"contextId": "c-4", "pageSize": 2, "pageToken": "2", "includeArtifacts": True},
    )
    assert [t["id"] for t in rest["tasks"]] == ids[:1]
    assert rest["nextPageToken"] == ""
    assert rest["tasks"][0]["artifacts"][0]["parts"] == [{"text": "Answer 0."}]
    assert result(base, "ListTasks", {"contextId": "other"})["tasks"] == []
    done = result(base, "ListTasks", {"status": "TASK_STATE_COMPLETED"})
    assert done["totalSize"] == 3
    since = result(base, "ListTasks", {"statusTimestampAfter": "2026-01-01T00:00:00Z"})
    assert since["totalSize"] == 3
    assert (
        result(base, "ListTasks", {"statusTimestampAfter": "2999-01-01T00:00:00Z"})["tasks"] == []
    )
    assert error(base, rpc("ListTasks", {"pageSize": 101})) == (
        200,
        -32602,
        "params.pageSize: 1 to 100, not 101",
    )


def test_each_bad_request_is_an_a2a_error_that_says_what_to_send(serve: Any) -> None:
    base = serve(harness(reply("Hi."))).base_url
    ask = {"message": message("Hi")}
    assert error(base, rpc("SendMessage", ask), headers={}) == (
        200,
        -32009,
        "no A2A-Version header (A2A 0.3) is not served: send the header A2A-Version: 1.0",
    )
    assert error(base, rpc("SendMessage", ask), headers={"A2A-Version": "2.0"})[1:] == (
        -32009,
        "A2A-Version '2.0' is not served: send the header A2A-Version: 1.0",
    )
    assert error(base, rpc("tasks/send", ask)) == (
        200,
        -32601,
        "method 'tasks/send': no such A2A method",
    )
    assert error(base, {"id": 3, "method": "SendMessage"})[1] == -32600
    assert error(base, rpc("GetTask", {"id": "nope"})) == (
        200,
        -32001,
        "task 'nope': no such task (the last 10000 are kept)",
    )
    status, code, said = error(base, rpc("SendMessage", {"message": {"parts": "text"}}))
    assert (status, code, said[:8]) == (200, -32602, "params: ")
    assert error(base, rpc("SendMessage", {"message": message("x") | {"parts": []}}))[2] == (
        "params.message.parts: one part or more is wanted"
    )
    assert error(base, rpc("SubscribeToTask", {"id": "t"}))[1] == -32004
    assert error(base, rpc("CreateTaskPushNotificationConfig", {}))[1] == -32003
    assert error(base, rpc("GetExtendedAgentCard", {}))[1] == -32007
    with httpx.Client(base_url=base) as client:
        bad = client.post("/a2a", content=b"{nope", headers=VERSION)
    assert bad.status_code == 400
    assert bad.json()["error"]["code"] == -32700
    assert bad.json()["error"]["message"].startswith("request body is not JSON")


def test_a_busy_context_refuses_a_second_message(serve: Any, tmp_path: Path) -> None:
    """A context's conversation runs one message at a time: a second one, while the
    first works, is an error that says so, and the first goes on."""
    h = waiting_harness(tmp_path / "s.db")
    base = serve(h).base_url
    first = at_once(base, "Wait.", "c-5")
    status, code, said = error(
        base, rpc("SendMessage", {"message": message("And?", contextId="c-5")})
    )
    assert (status, code) == (200, -32602)
    assert "a2a:c-5" in said
    assert result(base, "GetTask", {"id": first["id"]})["status"]["state"] == "TASK_STATE_WORKING"
    result(base, "CancelTask", {"id": first["id"]})
    assert ended(h, "a2a:c-5").final_state == "aborted"


async def test_a_client_gone_before_the_stream_cancels_its_task_and_frees_the_context(
    tmp_path: Path,
) -> None:
    """The client goes away before the stream's first byte, its run waiting in a tool:
    the run is aborted, the task cancelled, saying why, and the context takes its next
    message."""
    script = [reply("Waiting.", tool_call("wait_forever", {"reason": "test"})), reply("Hello.")]
    params = HarnessParams(model="scripted:m", tools=[wait_forever])
    h = Harness(params, [ScriptedProvider(script)], checkpointer=f"sqlite:///{tmp_path / 's.db'}")
    application = app(h)
    ask = {"message": message("Hi", contextId="early")}
    async with application.lifespan(application):  # on leaving: every run has ended
        await leave_before_the_stream(application, "/a2a", rpc("SendStreamingMessage", ask))
    transport = httpx.ASGITransport(app=application)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
        again = await c.post("/a2a", json=rpc("SendMessage", ask), headers=VERSION)
        listed = await c.post(
            "/a2a", json=rpc("ListTasks", {"contextId": "early"}), headers=VERSION
        )
    assert again.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    left = listed.json()["result"]["tasks"][-1]["status"]
    assert left["state"] == "TASK_STATE_CANCELED"
    assert left["message"]["parts"] == [{"text": "the client went away: the run was aborted"}]
    state = h.checkpoint("a2a:early").state
    assert_valid_history(state.history)
    assert [m.text for m in state.history if m.role == "user" and m.text] == ["Hi", "Hi"]
    assert state.history[-1].text == "Hello."


def test_an_oversized_body_is_a_413_with_a_json_rpc_error(serve: Any) -> None:
    server = serve(harness(), max_body_bytes=100)
    status, code, said = error(server.base_url, rpc("SendMessage", {"message": message("x" * 200)}))
    assert (status, code) == (413, -32600)
    assert said.startswith("request body of ")
    assert said.endswith(" bytes: at most 100 are read")


def test_a_task_cancelled_while_it_streams_ends_its_stream_cancelled(
    serve: Any, tmp_path: Path
) -> None:
    """CancelTask, the task's stream open: the run is aborted and the stream's last
    update is the cancelled task, saying so once."""
    h = waiting_harness(tmp_path / "s.db")
    base = serve(h).base_url
    body = rpc("SendStreamingMessage", {"message": message("Wait.", contextId="c-6")})
    results = []
    with (
        httpx.Client(base_url=base) as client,
        client.stream("POST", "/a2a", json=body, headers=VERSION) as answer,
    ):
        for line in answer.iter_lines():
            if not line.startswith("data: "):
                continue
            results.append(json.loads(line[len("data: ") :])["result"])
            if "Waiting." in line:
                task_id = results[0]["task"]["id"]
                assert result(base, "CancelTask", {"id": task_id})["status"]["state"] == (
                    "TASK_STATE_CANCELED"
                )
    last = results[-1]["statusUpdate"]["status"]
    assert last["state"] == "TASK_STATE_CANCELED"
    assert last["message"]["parts"] == [{"text": "the task was cancelled"}]
    history = result(base, "GetTask", {"id": task_id})["history"]
    said = [m["parts"][0]["text"] for m in history]
    assert said == ["Wait.", "the task was cancelled"]
    assert h.checkpoint("a2a:c-6").state.final_state == "aborted"
