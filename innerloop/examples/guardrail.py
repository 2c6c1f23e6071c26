"""Worked example: a guardrail state that redacts secrets from tool output.

The spec edit::

    spec = with_guardrail(DEFAULT_SPEC)

inserts a ``redact`` state on the ``execute -> check`` edge. Before the tool results reach
the model, ``redact`` rewrites the last message's tool results, replacing anything that
looks like a secret (the one set every sink of innerloop uses, ``SECRET_PATTERNS`` in
``innerloop.lowlevel``: Anthropic ``sk-ant-...``, OpenAI ``sk-...``, AWS ``AKIA...``,
GitHub ``ghp_...``, Google ``AIza...``, Slack, Stripe, private key blocks, JWTs, ...) with
``[REDACTED <kind>]``, and yields an ``alert`` event saying how many it removed. The
``tool_executed`` events the host saw earlier keep the raw output; only
the model's view is redacted.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import attrs

from innerloop import Message, ToolResultBlock
from innerloop.events import Alert, Event
from innerloop.fsm import (
    DEFAULT_SPEC,
    MachineSpec,
    OutcomeEnum,
    PhaseContext,
    StateSpec,
    TransitionSpec,
)
from innerloop.lowlevel import SECRET_PATTERNS, replace_secrets

__all__ = ["SECRET_PATTERNS", "RedactOutcome", "redact", "redact_secrets", "with_guardrail"]


def redact_secrets(text: str) -> tuple[str, list[str]]:
    """``text`` with every secret of ``SECRET_PATTERNS`` replaced by ``[REDACTED <kind>]``,
    and the kinds found."""
    return replace_secrets(text, lambda kind: f"[REDACTED {kind}]")


class RedactOutcome(OutcomeEnum):
    REDACTED = "redacted"
    CLEAN = "clean"


def _clean(block: ToolResultBlock, found: list[str]) -> ToolResultBlock:
    """``block`` with the secrets of its content replaced (their kinds added to ``found``)."""
    content, kinds = redact_secrets(block.content)
    found += kinds
    return attrs.evolve(block, content=content)


async def redact(ctx: PhaseContext) -> AsyncIterator[Event]:
    """The ``redact`` phase: clean the tool results of the last (user) message."""
    state = ctx.state
    last = state.history[-1]
    found: list[str] = []
    blocks = [_clean(b, found) if isinstance(b, ToolResultBlock) else b for b in last.content]
    state.outcome = RedactOutcome.REDACTED if found else RedactOutcome.CLEAN
    if found:
        state.history[-1] = Message(last.role, tuple(blocks))
        ctx.deps.tokens.forget_missing(state.history)
        names = ", ".join(sorted(set(found)))
        yield Alert("secret_redacted", f"removed {len(found)} secret(s) from tool output: {names}")


def with_guardrail(spec: MachineSpec = DEFAULT_SPEC) -> MachineSpec:
    """``spec`` with a ``redact`` state between ``execute`` and ``check``.

    ``redact`` leaves to ``abort`` when an abort is requested, else to ``check``.
    ``spec`` itself is not changed."""
    state = StateSpec("redact", doc="remove secrets from tool output before the model sees it")
    guardrail = spec.insert_between(
        "execute",
        "check",
        state,
        redact,
        transitions=(
            TransitionSpec("redact", "abort", "abort_requested", "recovery"),
            TransitionSpec("redact", "check"),
        ),
    ).renamed("guardrail")
    if spec is DEFAULT_SPEC:
        return guardrail.with_import_path(f"{__package__}:with_guardrail")
    return guardrail
