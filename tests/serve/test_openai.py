"""The OpenAI-compatible route, driven by the real ``openai`` SDK."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest

from innerloop.testing import reply
from tests.serve.conftest import harness, sent, weather_script


def client(server: Any, key: str = "unused") -> openai.OpenAI:
    return openai.OpenAI(api_key=key, base_url=f"{server.base_url}/v1", max_retries=0)


def test_a_completion_runs_the_tool_inside_and_answers(serve: Any) -> None:
    """The tool call runs in the harness; the client sees the answer."""
    with client(serve(harness(*weather_script()))) as c:
        done = c.chat.completions.create(
            model="anything", messages=[{"role": "user", "content": "Weather in Lisbon?"}]
        )
    assert done.choices[0].message.content == "Sunny in Lisbon."
    assert done.choices[0].finish_reason == "stop"
    assert done.model == "anything"
    extension: Any = done.model_extra
    assert extension["innerloop"]["exit_reason"] == "model_complete"


def test_streaming_yields_the_text_and_asked_for_events(serve: Any) -> None:
    """stream=True: the answer's text deltas; innerloop_events adds the run's events."""
    with client(serve(harness(*weather_script()))) as c:
        stream = c.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "Weather?"}],
            stream=True,
            extra_body={"innerloop_events": True},
        )
        chunks = list(stream)
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == "Sunny in Lisbon."
    events = [
        ch.model_extra["innerloop_event"]["type"]
        for ch in chunks
        if not ch.choices and ch.model_extra and "innerloop_event" in ch.model_extra
    ]
    assert events[0] == "run_started"
    assert "tool_executed" in events
    assert events[-1] == "finished"
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_the_earlier_messages_are_the_history_without_a_conversation(serve: Any) -> None:
    """Without conversation_id the request's messages are the conversation, as in OpenAI's API."""
    h = harness(reply("Yes, Ana."))
    with client(serve(h)) as c:
        done = c.chat.completions.create(
            model="m",
            messages=[
                {"role": "system", "content": "ignored: the harness has its own"},
                {"role": "user", "content": "I am Ana."},
                {"role": "assistant", "content": "Hello Ana."},
                {"role": "user", "content": [{"type": "text", "text": "Who am I?"}]},
            ],
            extra_body={"innerloop_events": True},
        )
    started: Any = done.model_extra["innerloop"]["events"][0]  # type: ignore[index]
    assert [m["content"][0]["text"] for m in started["messages"]] == [
        "I am Ana.",
        "Hello Ana.",
        "Who am I?",
    ]


def test_a_conversation_goes_on_on_the_server(serve: Any) -> None:
    """conversation_id: the server keeps the history; its token is wanted from then on."""
    h = harness(reply("Hello Ana."), reply("You are Ana."))
    with client(serve(h)) as c:
        first = c.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "I am Ana."}],
            extra_body={"conversation_id": "chat-1"},
        )
        extra: Any = first.model_extra
        assert extra["conversation_id"] == "chat-1"
        with pytest.raises(openai.PermissionDeniedError, match="wants its conversation_token"):
            c.chat.completions.create(
                model="m",
                messages=[{"role": "user", "content": "Who am I?"}],
                extra_body={"conversation_id": "chat-1"},
            )
        with pytest.raises(openai.PermissionDeniedError, match="wrong conversation_token"):
            c.chat.completions.create(
                model="m",
                messages=[{"role": "user", "content": "Who am I?"}],
                extra_body={"conversation_id": "chat-1", "conversation_token": "guess"},
            )
        second = c.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "Who am I?"}],
            extra_body={
                "conversation_id": "chat-1",
                "conversation_token": extra["conversation_token"],
            },
        )
    assert second.choices[0].message.content == "You are Ana."
    session = h.session("chat-1")  # in memory: the served session is another object
    assert session.history == []
    assert sent(h) == ["I am Ana.", "Hello Ana.", "Who am I?"]


def test_served_runs_are_logged_for_the_live_view(serve: Any, tmp_path: Path) -> None:
    """runs_dir: each run's event log, listed by the live view's catalog like any run."""
    from innerloop.ui import Catalog

    with client(serve(harness(*weather_script()), runs_dir=tmp_path)) as c:
        c.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "Weather?"}],
            extra_body={"conversation_id": "../../etc/passwd"},
        )
    [log] = tmp_path.iterdir()
    assert log.name.startswith("served-")
    [run] = Catalog(runs_dir=tmp_path).runs()
    assert (run["status"], run["exit_reason"], run["turns"]) == ("finished", "model_complete", 2)
