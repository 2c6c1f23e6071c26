"""The sync facades' one piece: drive an eval coroutine to its end on a loop of its own."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["run_outside_a_loop"]

T = TypeVar("T")


def run_outside_a_loop(coroutine: Coroutine[Any, Any, T], call: str) -> T:
    """``coroutine``'s result, run by ``asyncio.run``; inside a running event loop, which
    it would block, a RuntimeError naming ``await call(...)`` instead (the coroutine is
    closed unstarted)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    coroutine.close()
    raise RuntimeError(
        f"{call}_sync was called inside a running event loop, which it would block; "
        f"use `await {call}(...)` there"
    )
