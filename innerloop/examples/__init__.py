"""Worked examples of custom states, each a function that edits a copy of a spec.

* :func:`with_approval` (``approval.py``): a human approves each tool call before it runs;
* :func:`with_guardrail` (``guardrail.py``): secrets are redacted from tool output;
* :func:`with_cost_cap` (``costcap.py``): the host is asked before spending goes on;
* :func:`research_machine` (``research.py``): machines inside machines, a research agent
  that fans out to two scouts (one asks for approval) and hands off to a typed writer.

None of them changes the spec it is given. Their diagrams are in ``diagrams/examples/``.
"""

from __future__ import annotations

from innerloop.examples.approval import DENIED, Approver, with_approval
from innerloop.examples.costcap import CostCap, Spending, with_cost_cap
from innerloop.examples.guardrail import SECRET_PATTERNS, redact_secrets, with_guardrail
from innerloop.examples.research import research_machine
from innerloop.fsm import MachineSpec

__all__ = [
    "DENIED",
    "SECRET_PATTERNS",
    "Approver",
    "CostCap",
    "Spending",
    "example_specs",
    "redact_secrets",
    "research_machine",
    "with_approval",
    "with_cost_cap",
    "with_guardrail",
]


def example_specs() -> dict[str, MachineSpec]:
    """The three example machines by name, built with callbacks that always say yes (the
    structure does not depend on the callbacks); for diagrams and coverage."""
    return {
        "approval": with_approval(lambda call, state: True),
        "guardrail": with_guardrail(),
        "costcap": with_cost_cap(CostCap(max_cost_usd=1.0), lambda spending, state: True),
    }
