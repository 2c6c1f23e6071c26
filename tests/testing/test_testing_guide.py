"""The testing guide's test module (docs/guides/testing.md) runs as written, under pytest
with the settings the guide gives (pytest-asyncio in auto mode)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "testing.md"


def test_the_scenario_tests_pass(pytester: pytest.Pytester) -> None:
    """Its sync scenario test and its async handler test both pass (none skipped)."""
    section = GUIDE.read_text()
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    module = next(b for b in blocks if "async def test_" in b)
    toml = re.search(r"```toml\n(.*?)```", section, re.S)
    assert toml is not None
    assert 'asyncio_mode = "auto"' in toml.group(1)
    pytester.makeini(
        "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n"
    )
    pytester.makepyfile(test_guardrail=module)
    result = pytester.runpytest("-p", "innerloop.testing.pytest_plugin", "-W", "error")
    result.assert_outcomes(passed=2)
