"""The manual's pages and their Python blocks, as the docs tests collect them."""

from __future__ import annotations

import re
from pathlib import Path

from pytest_examples import CodeExample, find_examples

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"

FENCE = re.compile(r"^ *```(\S*)(.*)$", re.M)
"""An opening or closing fence line: its language and what follows it."""

SETTINGS = {"test": {"skip"}}
"""The settings a block's fence may carry, and their values: ```python {test="skip"}
marks a fragment, only checked to parse."""


def pages() -> list[Path]:
    """Every Markdown page of the site, then README.md."""
    return [*sorted(DOCS.rglob("*.md")), README]


def python_blocks() -> list[CodeExample]:
    """Every ```python block of the pages, in order."""
    return [e for e in find_examples(*pages()) if e.prefix.split()[0] in ("python", "py")]


def python_fences(path: Path) -> list[str]:
    """The opening fence lines of the Python blocks of one page, read line by line
    without pytest-examples (so a block it would not collect is still counted)."""
    found: list[str] = []
    inside = False
    for line in path.read_text(encoding="utf-8").splitlines():
        fence = FENCE.match(line)
        if fence is None:
            continue
        if inside:
            inside = fence.group(0).strip() != "```"  # a bare fence closes the block
            continue
        inside = True
        if fence.group(1).lower() in ("python", "py", "python3", "py3"):
            found.append(line.strip())
    return found


def skipped(example: CodeExample) -> bool:
    """Whether the block's fence says ``{test="skip"}``."""
    return example.prefix_settings().get("test") == "skip"
