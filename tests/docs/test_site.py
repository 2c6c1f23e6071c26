"""The documentation site builds with ``mkdocs build --strict``: a broken link, a missing
anchor, a missing included file or an API reference naming nothing fails the suite."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.docs._pages import DOCS, ROOT


def build(config: Path, out: Path) -> subprocess.CompletedProcess[str]:
    """``mkdocs build --strict`` of one config into ``out`` (not ``-q``: it hides the
    warnings from the strict count too)."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # the theme's notice, not a warning
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", config, "-d", out],
        capture_output=True,
        text=True,
        cwd=config.parent,
        env=env,
        timeout=300,
    )


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    """The site as committed builds with no warning, and the API reference is there."""
    done = build(ROOT / "mkdocs.yml", tmp_path)
    assert done.returncode == 0, done.stderr
    api = (tmp_path / "reference" / "api" / "innerloop" / "index.html").read_text()
    assert 'id="innerloop.Harness"' in api
    assert 'id="innerloop.HarnessParams"' in api


def test_a_broken_link_fails_and_a_page_outside_the_nav_does_not(tmp_path: Path) -> None:
    """The strict build can fail: a link to a page that does not exist is a warning, so
    the build aborts naming it; a new page not yet in the nav is only reported."""
    shutil.copytree(DOCS, tmp_path / "docs", symlinks=True)
    shutil.copytree(ROOT / "diagrams", tmp_path / "diagrams")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    for api in (tmp_path / "docs" / "reference" / "api").glob("innerloop*.md"):
        api.write_text(f"# {api.stem}\n")  # the reference is not what is tested here: quicker
    page = tmp_path / "docs" / "guides" / "new-topic.md"
    page.write_text("# A new topic\n\nSee [the machine](../concepts/machin.md).\n")
    done = build(tmp_path / "mkdocs.yml", tmp_path / "site")
    said = done.stdout + done.stderr
    assert done.returncode == 1, said
    warnings = [line for line in said.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 1, said
    assert "'guides/new-topic.md' contains a link '../concepts/machin.md'" in warnings[0]
    assert "Aborted with 1 warnings in strict mode!" in said
    omitted = said.split('not included in the "nav" configuration:\n', 1)[1]
    assert "  - guides/new-topic.md" in omitted.split("\nINFO")[0], said
