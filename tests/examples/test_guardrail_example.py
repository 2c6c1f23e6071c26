from __future__ import annotations

import json
from typing import Any

import pytest

from innerloop import HarnessParams, HarnessState, Message, ToolResultBlock
from innerloop.examples import redact_secrets, with_guardrail
from innerloop.fsm import compile_spec
from innerloop.testing import ScriptedProvider, TransitionCoverage, machine_at, reply, tool_call
from innerloop.tools import ToolOutput, ToolSpec

PARAMS = HarnessParams(model="scripted:m")
GUARDRAIL = compile_spec(with_guardrail())
ANTHROPIC = "sk-ant-api03-" + "A1b2C3d4" * 4
OPENAI = "sk-proj-" + "Zz9Yy8Xx" * 3
AWS = "AKIA" + "ABCDEFGHIJKLMNOP"
GITHUB = "ghp_" + "a1B2" * 9


def after_tools() -> HarnessState:
    call = tool_call("env", {}, id="t1")
    results = Message.user([ToolResultBlock("t1", "ok")])
    return HarnessState(history=[Message.user("go"), Message.assistant([call]), results])


class TestTransitions:
    def test_execute_to_redact(self, transition_coverage: TransitionCoverage) -> None:
        """After tools ran, execute goes to redact instead of check."""
        probe = machine_at(
            GUARDRAIL, "execute", after_tools(), PARAMS, observers=[transition_coverage]
        )
        assert probe.step() == "redact"

    def test_redact_to_check(self, transition_coverage: TransitionCoverage) -> None:
        """redact goes on to check."""
        probe = machine_at(
            GUARDRAIL, "redact", after_tools(), PARAMS, observers=[transition_coverage]
        )
        assert probe.step() == "check"

    def test_redact_abort(self, transition_coverage: TransitionCoverage) -> None:
        """An abort requested during redaction goes to abort."""
        state = after_tools()
        state.request_abort()
        probe = machine_at(GUARDRAIL, "redact", state, PARAMS, observers=[transition_coverage])
        assert probe.step() == "abort"


class TestRedactSecrets:
    @pytest.mark.parametrize(
        ("secret", "kind"),
        [
            (ANTHROPIC, "anthropic_key"),
            (OPENAI, "openai_key"),
            ("sk-" + "q" * 40, "openai_key"),
            (AWS, "aws_access_key"),
            (GITHUB, "github_token"),
        ],
    )
    def test_each_kind(self, secret: str, kind: str) -> None:
        """Each key pattern is replaced by a marker naming its kind."""
        assert redact_secrets(f"key={secret}\n") == (f"key=[REDACTED {kind}]\n", [kind])

    def test_plain_text_untouched(self) -> None:
        """Text without secrets, including short sk- words, is left as it is."""
        text = "ask-me sk-short AKIA123 ghp_short"
        assert redact_secrets(text) == (text, [])


def test_secrets_never_reach_the_model(make_harness: Any) -> None:
    """The model's history and its wire request hold markers, not the keys; an alert says
    how many were removed."""

    async def env(args: Any, ctx: Any) -> ToolOutput:
        return ToolOutput(f"ANTHROPIC_API_KEY={ANTHROPIC}\nAWS={AWS}\nHOME=/root")

    params = HarnessParams(model="scripted:m", tools=[ToolSpec("env", "Env", {}, env)])
    provider = ScriptedProvider([reply(tool_call("env", {}, id="e1")), reply("done")])
    events: list[Any] = []
    harness = make_harness(params, provider, machine=with_guardrail())
    state = harness.run_sync("show env", on_event=events.append)
    assert state.exit_reason == "model_complete"
    assert state.history[2].content == (
        ToolResultBlock(
            "e1",
            "ANTHROPIC_API_KEY=[REDACTED anthropic_key]\nAWS=[REDACTED aws_access_key]\nHOME=/root",
        ),
    )
    wire = json.dumps(provider.requests[1].payload)
    assert ANTHROPIC not in wire
    assert AWS not in wire
    alerts = [e.to_dict() for e in events if e.type == "alert"]
    assert alerts == [
        {
            "type": "alert",
            "kind": "secret_redacted",
            "message": "removed 2 secret(s) from tool output: anthropic_key, aws_access_key",
        }
    ]
