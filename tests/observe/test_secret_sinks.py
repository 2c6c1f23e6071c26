"""The one set of secret shapes (``innerloop.lowlevel.SECRET_PATTERNS``): each pattern
catches its documented shape and spares its near misses, and every sink (logs, spans,
diagnostics, the guardrail example) hides each of them.

The samples are assembled at run time, so no whole token sits in the source."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from innerloop import HarnessParams, ToolSpec
from innerloop.examples import redact_secrets
from innerloop.lowlevel import SECRET_PATTERNS, scrub_secrets
from innerloop.observe import Tracing
from innerloop.testing import Fault, Reply, ScriptedProvider, reply, tool_call
from innerloop.tools import ToolContext, ToolOutput

B62 = "aB3dE5gH7jK9mN1pQ2rS4tU6vW8xY0zA1cD2eF3g"
"""42 base62 characters to cut samples from."""

SAMPLES: Mapping[str, tuple[str, str]] = {
    # kind: (text holding the secret, the secret itself)
    "anthropic_key": ("k=" + "sk-ant-" + "api03-" + B62[:24], "sk-ant-api03-" + B62[:24]),
    "openai_key": ("k=" + "sk-" + "proj-" + B62[:30], "sk-proj-" + B62[:30]),
    "aws_access_key": ("id AKIA" + "IOSFODNN7EXAMPLE ok", "AKIAIOSFODNN7EXAMPLE"),
    "aws_secret_key": (
        "aws_secret_access_key = " + "wJalrXUtnFEMI/K7MDENG/bPxRfiCY" + "EXAMPLEKEY",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    ),
    "github_token": ("token ghp_" + B62[:36], "ghp_" + B62[:36]),
    "gitlab_token": ("token glpat-" + B62[:20], "glpat-" + B62[:20]),
    "google_api_key": ("key=AIza" + "Sy" + B62[:33] + "&q=1", "AIzaSy" + B62[:33]),
    "slack_token": ("xoxb-" + "1234567890-" + B62[:24], "xoxb-1234567890-" + B62[:24]),
    "slack_webhook": (
        "post to https://hooks.slack.com/services/" + "T0000/B0000/" + B62[:24],
        "T0000/B0000/" + B62[:24],
    ),
    "stripe_key": ("sk_" + "live_" + B62[:24], "sk_live_" + B62[:24]),
    "npm_token": ("//registry/:_authToken=npm_" + B62[:36], "npm_" + B62[:36]),
    "huggingface_token": ("HF hf_" + "abcdefghijklmnopqrstuvwxyzABCDEFGH", "hf_abcdefghijklmno"),
    "sendgrid_key": ("SG." + B62[:22] + "." + B62[:40] + "xyz", "SG." + B62[:22]),
    "private_key": (
        "-----BEGIN RSA " + "PRIVATE KEY-----\nMIIEow" + B62 + "\n-----END RSA PRIVATE KEY-----",
        "MIIEow" + B62,
    ),
    "jwt": (
        "token eyJhbGciOiJIUzI1NiJ9." + "eyJzdWIiOiIxMjM0NTY3ODkwIn0." + B62[:30],
        "eyJzdWIiOiIxMjM0NTY3ODkwIn0",
    ),
    "bearer_token": ("sent Bearer " + B62[:20] + " then", B62[:20]),
    "auth_header": ("{'X-Api-Key': '" + "plainkey12345'}", "plainkey12345"),
}

NEAR_MISSES = (
    "ask-me sk-short",
    "AKIA123 and AKIAIOSFODNN7EXAMPL",  # 15 characters after the prefix
    "ghp_short github_pat_x",
    "AIza is a prefix",
    "pk_live_publishable",  # Stripe publishable keys are public
    "-----BEGIN PUBLIC KEY-----",
    "eyJhbGciOiJIUzI1NiJ9 alone",
    "xoxb- and hf_short and npm_short",
    "the bearer of bad news",
    "aws_secret_access_key = short",
    "xAKIAIOSFODNN7EXAMPLE",  # inside a word
)


def test_every_pattern_has_a_sample() -> None:
    """A pattern added to the set needs its test here."""
    assert set(SAMPLES) == set(SECRET_PATTERNS)


@pytest.mark.parametrize("kind", list(SAMPLES))
def test_each_pattern_is_scrubbed(kind: str) -> None:
    """``scrub_secrets`` (logs, spans, diagnostics, errors) removes each shape."""
    text, secret = SAMPLES[kind]
    scrubbed = scrub_secrets(f"before {text} after")
    assert secret not in scrubbed
    assert "[redacted]" in scrubbed
    assert scrubbed.startswith("before ")


@pytest.mark.parametrize("kind", list(SAMPLES))
def test_the_guardrail_names_each_kind(kind: str) -> None:
    """The guardrail example uses the same set, naming the kind it removed."""
    text, secret = SAMPLES[kind]
    redacted, kinds = redact_secrets(text)
    assert kinds == [kind]
    assert f"[REDACTED {kind}]" in redacted
    assert secret not in redacted


@pytest.mark.parametrize("kind", list(SAMPLES))
def test_each_pattern_is_found_in_json_text(kind: str) -> None:
    """In JSON text (spans, the live view), after an escaped newline too, a secret goes
    and the text still parses, to the same string scrubbed."""
    text, secret = SAMPLES[kind]
    raw = {"output": f'line\n{text}\n"quoted"'}
    scrubbed = scrub_secrets(json.dumps(raw))
    assert secret not in scrubbed
    assert json.loads(scrubbed)["output"] == scrub_secrets(raw["output"])


@pytest.mark.parametrize("text", NEAR_MISSES)
def test_near_misses_are_left_alone(text: str) -> None:
    """Ordinary text shaped almost like a secret stays as it is."""
    assert scrub_secrets(text) == text
    assert redact_secrets(text) == (text, [])


def test_a_header_keeps_its_name() -> None:
    """Only the value of a header is replaced."""
    assert scrub_secrets("Authorization: Bearer " + B62[:16]) == "Authorization: Bearer [redacted]"


ALL = "\n".join(text for text, _ in SAMPLES.values())


async def _env(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    return ToolOutput(ALL, is_error=True)


def test_no_sink_shows_any_secret(
    make_harness: Any,
    exporter: InMemorySpanExporter,
    tracer_provider: TracerProvider,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A tool's output and a provider's error holding every shape: the spans (content
    captured), the log records and the diagnostic hold none of them."""
    caplog.set_level(logging.DEBUG, logger="innerloop")
    script: list[Reply | Fault] = [
        reply("", tool_call("env", {"x": ALL})),
        Fault("fatal", 401, None, ALL),
    ]
    params = HarnessParams(
        model="scripted:m-20250101", tools=(ToolSpec("env", "Env", {"type": "object"}, _env),)
    )
    harness = make_harness(
        params,
        ScriptedProvider(script),
        observers=[Tracing(tracer_provider=tracer_provider, capture_content=True)],
    )
    state = harness.run_sync(f"look: {ALL}")
    assert state.exit_reason == "failed"
    sinks = {
        "spans": "".join(span.to_json() for span in exporter.get_finished_spans()),
        "logs": "".join(r.getMessage() + repr(vars(r)) for r in caplog.records),
        "diagnostic": repr(state.diagnostic),
    }
    assert all("[redacted]" in text for text in sinks.values())
    leaks = {
        (sink, kind)
        for sink, text in sinks.items()
        for kind, (_, secret) in SAMPLES.items()
        if secret in text
    }
    assert leaks == set()
