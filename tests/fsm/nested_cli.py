"""A machine for the command line's nested resume test (``--spec tests.fsm.nested_cli:SPEC``):
``survey`` fans out one ``web`` child per line of the request, each on the approval
machine with ``delete_file``, on the parent's providers (the command line's)."""

from __future__ import annotations

from typing import Any

from innerloop import Child, HarnessParams, tool
from innerloop.examples import with_approval
from innerloop.fsm import DEFAULT_SPEC, MachineSpec, StateSpec, fan_out_handler, with_child_state

MODEL = "anthropic:claude-sonnet-4-5-20250929"


@tool
async def delete_file(path: str) -> str:
    """Delete a file."""
    return f"deleted {path}"


def survey(child: Child[Any], name: str) -> MachineSpec:
    """The default machine with a ``survey`` state fanning ``child`` out over the lines
    of the request (failures to ``failed``), named ``name``."""
    return with_child_state(
        DEFAULT_SPEC,
        StateSpec("survey", doc="one agent per line of the request"),
        fan_out_handler(child, lambda s: s.history[-1].text.splitlines()),
        source="idle",
        target="assemble",
        on_failure="failed",
    ).renamed(name)


WEB = Child("web", HarnessParams(model=MODEL, tools=[delete_file]), machine=with_approval())
SPEC = survey(WEB, "nested_cli").with_import_path("tests.fsm.nested_cli:SPEC")
