"""Pending tasks: seeded by the host, kept by the model through the task tool."""

from __future__ import annotations

import attrs

__all__ = ["Task"]


@attrs.define
class Task:
    """A pending task: seeded by the host or kept by the model through the task tool."""

    id: str
    text: str
    done: bool = False
