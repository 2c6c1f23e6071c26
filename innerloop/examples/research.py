"""Worked example: machines inside machines.

A research agent fans out to two scouts (sub-agents with their own tools and models), one
of which asks the host before a call that spends money; it reads what they found, then
hands the conversation to a writer whose answer is typed (:class:`Brief`)::

    spec = research_machine(scout(...), writer(...), questions)

The research machine is the default machine with two child states:

* ``survey`` on ``idle -> assemble``: :func:`~innerloop.fsm.fan_out_handler` runs the
  scout once per question (``scout#1``, ``scout#2``), side by side; their answers join, in
  order, as one user turn for the research agent's model;
* ``write`` on ``check -> model_complete``: :func:`~innerloop.fsm.handoff_handler` hands
  the conversation to the writer, whose history (ending with its ``Brief``) becomes the
  research agent's, with its typed output.

A scout runs :func:`scout_machine`: the approval machine (see ``approval.py``) that asks
the host only before a turn that calls a paid tool (:data:`PAID`); its other calls run
at once. When it asks, the whole run suspends with the scout's ``approval`` interrupt,
and ``harness.resume(run, True)`` lands in that scout.

The tools answer from canned data, so the example runs offline.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Mapping, Sequence

import pydantic

from innerloop import Child, HarnessParams, ToolSpec, tool
from innerloop.examples.approval import ApprovalOutcome, approve_handler, with_approval
from innerloop.fsm import (
    DEFAULT_SPEC,
    Handler,
    HarnessState,
    MachineSpec,
    PhaseContext,
    StateSpec,
    fan_out_handler,
    handoff_handler,
    with_child_state,
)
from innerloop.providers import Provider

__all__ = [
    "PAID",
    "SCOUT_TOOLS",
    "Brief",
    "approve_paid",
    "buy_report",
    "research_machine",
    "scout",
    "scout_machine",
    "web_search",
    "writer",
]


class Brief(pydantic.BaseModel):
    """The writer's typed answer."""

    title: str
    findings: list[str]
    sources: list[str]


SEARCH_RESULTS = {
    "heat pumps": "IEA 2024: heat pump sales in Europe fell 21% in 2024 after a record 2022.",
}
REPORTS = {
    "EHPA market report 2025": "EHPA 2025: 2.3 million units sold in 2024; Poland -40%.",
}


@tool(category="network")
async def web_search(query: str) -> str:
    """Search the web; the top result.

    Args:
        query: What to search for.
    """
    for key, found in SEARCH_RESULTS.items():
        if key in query.lower():
            return found
    return f"no results for {query!r}"


@tool(category="network")
async def buy_report(title: str) -> str:
    """Buy a market report (4 USD) and read its summary.

    Args:
        title: The report's title.
    """
    return REPORTS.get(title, f"no report titled {title!r}")


SCOUT_TOOLS: tuple[ToolSpec, ...] = (web_search, buy_report)
"""The scouts' own tools (the research agent has none)."""
PAID: frozenset[str] = frozenset({"buy_report"})
"""The tools that spend money: a scout asks the host before a turn that calls one."""


def approve_paid(paid: Container[str] = PAID) -> Handler:
    """The ``approve`` phase of :func:`scout_machine`: a turn that calls one of ``paid``
    waits for the host's approval of its calls (the approval machine's ``approval``
    interrupt); any other turn's calls run at once."""
    ask_host = approve_handler()

    async def approve(ctx: PhaseContext) -> None:
        calls = ctx.state.history[-1].tool_uses
        answered = ctx.state.interrupt is not None  # resumed here: the approval's answer
        if not answered and not any(c.name in paid for c in calls):
            ctx.state.outcome = ApprovalOutcome.APPROVED
            return
        await ask_host(ctx)  # asks, or reads the answer (``ctx.resumed`` takes it)

    return approve


def scout_machine(paid: Container[str] = PAID) -> MachineSpec:
    """The approval machine, asking only before calls to ``paid`` tools."""
    return with_approval().replace_handler("approve", approve_paid(paid)).renamed("scout")


def scout(
    model: str,
    providers: Mapping[str, Provider] | None = None,
    *,
    tools: Sequence[ToolSpec] = SCOUT_TOOLS,
) -> Child[None]:
    """A scout: a sub-agent on ``model`` with its own ``tools``, on :func:`scout_machine`."""
    params = HarnessParams(
        model=model,
        system="You are a research scout. Find one fact with your tools; cite it.",
        tools=tools,
        max_turns=4,
    )
    return Child("scout", params, machine=scout_machine(), providers=providers)


def writer(model: str, providers: Mapping[str, Provider] | None = None) -> Child[Brief]:
    """The writer the research agent hands the conversation to: its answer is a
    :class:`Brief`."""
    params = HarnessParams(
        model=model,
        system="You write the final brief from the research notes.",
        output_type=Brief,
        max_turns=3,
    )
    return Child("writer", params, providers=providers)


def research_machine(
    scout: Child[None],
    writer: Child[Brief],
    questions: Callable[[HarnessState], Sequence[str]],
    *,
    limit: int = 2,
) -> MachineSpec:
    """The default machine with a ``survey`` fan-out of ``scout`` over
    ``questions(state)`` (``limit`` at a time) before the first model call, and a
    handoff to ``writer`` once the research agent's answer is done."""
    surveyed = with_child_state(
        DEFAULT_SPEC,
        StateSpec("survey", doc="the scouts look up one question each, side by side"),
        fan_out_handler(scout, questions, limit=limit),
        source="idle",
        target="assemble",
        on_failure="failed",
    )
    return with_child_state(
        surveyed,
        StateSpec("write", doc="the writer takes the conversation over"),
        handoff_handler(writer),
        source="check",
        target="model_complete",
        on_failure="failed",
    ).renamed("research")
