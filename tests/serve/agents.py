"""Harnesses named on ``innerloop serve``'s command line by the tests."""

from __future__ import annotations

from typing import Any

from innerloop import Harness
from tests.serve.conftest import harness, weather_script


def weather_agent() -> Harness[Any]:
    """A function of no argument returning a harness: the scripted weather agent."""
    return harness(*weather_script())


NOT_A_HARNESS = 42
