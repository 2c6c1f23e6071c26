"""README.md, the front page, links into the manual: each relative link names a file of
the repository (the site's own build checks the links between its pages)."""

from __future__ import annotations

import re

from tests.docs._pages import README, ROOT

LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
"""The target of a Markdown link or image, without its anchor."""

CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)
"""Code blocks and code spans, where a ``](...)`` is code, not a link."""


def test_the_front_page_links_name_files() -> None:
    """No relative link of README.md points at a missing file (a page renamed or moved
    in docs/ would otherwise leave the front page pointing nowhere)."""
    prose = CODE.sub("", README.read_text())
    targets = [t for t in LINK.findall(prose) if "://" not in t]
    assert targets, "README.md links no page of the manual"
    missing = [t for t in targets if not (ROOT / t).exists()]
    assert missing == []
