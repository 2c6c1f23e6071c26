"""A custom state, drawn: a ``review`` state between ``check`` and ``model_complete`` that
sends an answer without a source back to the model once, then the run's path on the
machine's diagram.

    python examples/custom_state.py OUT_DIR
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from innerloop import Harness, HarnessParams, Message
from innerloop.diagrams import build_diagram, render, to_mermaid
from innerloop.fsm import (
    DEFAULT_SPEC,
    OutcomeEnum,
    PhaseContext,
    Run,
    StateSpec,
    TransitionSpec,
)
from innerloop.providers import AnthropicProvider
from innerloop.testing import AnthropicServer, reply


class Review(OutcomeEnum):
    SENT_BACK = "sent_back"
    PASSED = "passed"


async def review(ctx: PhaseContext) -> None:
    """Send an answer without a source back once; pass it otherwise."""
    answer = ctx.state.history[-1].text
    if "source:" not in answer and not ctx.state.notes.get("reviewed"):
        ctx.state.notes["reviewed"] = True
        ctx.state.history.append(Message.user("Cite a source (source: ...)."))
        ctx.state.outcome = Review.SENT_BACK
    else:
        ctx.state.outcome = Review.PASSED


def sent_back(ctx: PhaseContext) -> bool:
    """The reviewer asked the model for more."""
    return ctx.state.outcome == Review.SENT_BACK


SPEC = (
    DEFAULT_SPEC.with_guard("sent_back", sent_back)
    .insert_between(
        "check",
        "model_complete",
        StateSpec("review", doc="send an answer without a source back once"),
        review,
        transitions=(
            TransitionSpec("review", "abort", "abort_requested", "recovery"),
            TransitionSpec("review", "assemble", "sent_back", "recovery"),
            TransitionSpec("review", "model_complete"),
        ),
    )
    .renamed("reviewed")
    .with_import_path("examples.custom_state:SPEC")
)


async def main() -> Run:
    script = [reply("Lisbon is the capital."), reply("Lisbon. source: an atlas")]
    with AnthropicServer(script) as server:
        provider = AnthropicProvider("sk-ant-test", base_url=server.base_url)
        params = HarnessParams(model="anthropic:claude-sonnet-4-5-20250929", max_turns=4)
        run = Harness(params, [provider], machine=SPEC).start("Capital of Portugal?")
        state = await run.run()
    print(state.exit_reason, state.turns, repr(state.history[-1].text))
    print(" -> ".join([SPEC.initial, *(t.target for t in run.path)]))
    return run


def draw(run: Run, out: Path) -> None:
    diagram = build_diagram(run)  # the finished run: its path on its own machine
    out.mkdir(parents=True, exist_ok=True)
    (out / "reviewed.svg").write_bytes(render(diagram, "svg"))
    (out / "reviewed.mmd").write_text(to_mermaid(diagram))
    print(f"wrote {out / 'reviewed.svg'}")


if __name__ == "__main__":
    draw(asyncio.run(main()), Path(sys.argv[1] if len(sys.argv) > 1 else "runs/custom"))
