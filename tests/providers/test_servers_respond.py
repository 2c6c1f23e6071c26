"""A loopback server that answers by request (``respond=``): each body picks its step,
None falls back to the script, a step it cannot play is a 500 naming it."""

from __future__ import annotations

from typing import Any

import httpx

from innerloop.testing import AnthropicServer, RateLimit, ScriptStep, reply


def ask(server: AnthropicServer, text: str) -> httpx.Response:
    body = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": text}]}
    return httpx.post(server.url + "/v1/messages", json=body, timeout=10)


def test_respond_picks_by_body_and_falls_back_to_the_script() -> None:
    def respond(body: Any) -> ScriptStep | None:
        text = body["messages"][0]["content"]
        if text == "busy?":
            return RateLimit(retry_after=2)
        return reply(f"echo {text}") if text.startswith("echo") else None

    with AnthropicServer([reply("scripted")], respond=respond) as server:
        assert ask(server, "echo b").json()["content"][0]["text"] == "echo echo b"
        limited = ask(server, "busy?")
        assert (limited.status_code, limited.headers["retry-after"]) == (429, "2")
        assert ask(server, "other").json()["content"][0]["text"] == "scripted"
        assert ask(server, "echo a").json()["content"][0]["text"] == "echo echo a"
        assert server.played == 1  # only the fallback took a script step


def test_a_step_it_cannot_play_is_a_500_naming_it() -> None:
    with AnthropicServer(respond=lambda body: "not a step") as server:  # type: ignore[arg-type, return-value]
        response = ask(server, "x")
    assert response.status_code == 500
    assert "respond gave a str; a step is one of Reply, Fault, RateLimit" in response.text
