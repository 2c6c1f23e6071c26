"""The manual names public names only: no page sends a reader into a private module, no
public docstring points at a private module's docstring, and the state table (a page of
its own, docs/reference/state-table.md) is the default machine's."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import pytest

from innerloop.fsm import DEFAULT_SPEC
from tests.test_public_api import PACKAGES

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
PRIVATE = re.compile(r"innerloop/(?:\w+/)*_\w+\.py|innerloop(?:\.\w+)*\._\w+")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_page_names_a_private_module(page: Path) -> None:
    assert PRIVATE.findall(page.read_text(encoding="utf-8")) == []


def test_the_pattern_finds_private_modules() -> None:
    text = "see innerloop/fsm/_default.py and innerloop.fsm._phases, not innerloop.fsm"
    assert PRIVATE.findall(text) == ["innerloop/fsm/_default.py", "innerloop.fsm._phases"]


def _public_docstrings() -> list[tuple[str, str]]:
    found = []
    for name in PACKAGES:
        module = importlib.import_module(name)
        for attr in getattr(module, "__all__", ()):
            obj = getattr(module, attr)
            found.append((f"{name}.{attr}", inspect.getdoc(obj) or ""))
            for member, value in vars(obj).items() if inspect.isclass(obj) else ():
                if not member.startswith("_") and callable(value):
                    found.append((f"{name}.{attr}.{member}", inspect.getdoc(value) or ""))
    return found


def test_no_public_docstring_sends_the_reader_to_a_module_docstring() -> None:
    """``guard()``, ``tool()`` and ``Sandbox`` once said "see the module docstring" of a
    private module the reader cannot see in the manual."""
    docs = _public_docstrings()
    assert len(docs) > 300
    assert [where for where, doc in docs if "module docstring" in doc] == []
    assert [where for where, doc in docs if PRIVATE.search(doc)] == []


def test_the_state_table_page_is_the_default_machines() -> None:
    rows = ["| state | leaves to (first guard that holds wins) |", "|---|---|"]
    for state in DEFAULT_SPEC.states:
        out = DEFAULT_SPEC.transitions_from(state.name)
        if out:
            edges = " · ".join(t.target + (f" [{t.guard}]" if t.guard else "") for t in out)
            rows.append(f"| `{state.name}` | {edges} |")
    page = (ROOT / "docs" / "reference" / "state-table.md").read_text(encoding="utf-8")
    assert "\n".join(rows) + "\n" in page, "regenerate docs/reference/state-table.md"
    finals = ", ".join(f"`{s.name}`" for s in DEFAULT_SPEC.states if s.final)
    assert f"Final states: {finals};" in page
    assert "reference/state-table.md" in (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
