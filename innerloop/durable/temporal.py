"""The Temporal adapter (needs ``temporalio``: ``pip install 'innerloop[durable]'``)."""

from innerloop.durable._temporal import (
    LoopWorkflow,
    TemporalLoopHandle,
    TemporalLoops,
    TemporalOptions,
    WorkflowClock,
    temporal_worker,
)

__all__ = [
    "LoopWorkflow",
    "TemporalLoopHandle",
    "TemporalLoops",
    "TemporalOptions",
    "WorkflowClock",
    "temporal_worker",
]
