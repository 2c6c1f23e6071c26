"""Durable and distributed runs on Temporal (many workers) and DBOS (one host, durable).

The machine runs unchanged inside the engine's workflow; its three side-effecting objects
(provider, tool runner, compactor) become durable steps (see ``_steps.py``). Install the
engines with ``pip install 'innerloop[durable]'``. The engine adapters are imported from
their own modules so that neither engine is needed for the other:
``innerloop.durable.temporal`` and ``innerloop.durable.dbos``.
"""

from innerloop.durable._app import LoopApp, LoopDefinition, loop_input
from innerloop.durable._codec import (
    error_from_dict,
    error_to_dict,
    response_from_dict,
    state_from_dict,
    state_to_dict,
    tool_result_from_dict,
    tool_result_to_dict,
)
from innerloop.durable._steps import (
    COMPACTION,
    MODEL_CALL,
    TOOL_CALL,
    StepCall,
    StepCompactor,
    StepLost,
    StepProvider,
    StepToolRunner,
)

__all__ = [
    "COMPACTION",
    "MODEL_CALL",
    "TOOL_CALL",
    "LoopApp",
    "LoopDefinition",
    "StepCall",
    "StepCompactor",
    "StepLost",
    "StepProvider",
    "StepToolRunner",
    "error_from_dict",
    "error_to_dict",
    "loop_input",
    "response_from_dict",
    "state_from_dict",
    "state_to_dict",
    "tool_result_from_dict",
    "tool_result_to_dict",
]
