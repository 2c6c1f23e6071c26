"""Every ```python block of the manual (docs/**/*.md) and of README.md runs in the test
suite, each standalone: its own ``__main__`` namespace, a fresh working directory, no API
key or base URL in the environment, offline against the loopback servers and fakes of
innerloop.testing. A block with ``#>`` comment lines must print exactly those lines, in
their order (a block without them may print anything). A block fenced
```python {test="skip"} is a fragment: it is only parsed."""

from __future__ import annotations

import ast
import logging
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from pytest_examples import CodeExample

from tests.docs._pages import ROOT, SETTINGS, pages, python_blocks, python_fences, skipped

BLOCKS = python_blocks()

OUTPUT = re.compile(r"^[ \t]*#> ?(.*)$", re.M)
"""A line of what the block prints, as its ``#>`` comments show it."""


def _id(example: CodeExample) -> str:
    return f"{example.path.relative_to(ROOT)}:{example.start_line}"


def run_block(example: CodeExample) -> None:
    """Run one block as the program ``python block.py`` would, its tracebacks naming the
    page and the page's line numbers."""
    padded = "\n" * example.start_line + example.source  # line 1 follows the fence line
    code = compile(padded, str(example.path), "exec", dont_inherit=True)
    exec(code, {"__name__": "__main__", "__file__": str(example.path)})


def check_block(example: CodeExample, capsys: pytest.CaptureFixture[str]) -> None:
    """Parse a fragment; run any other block and compare what it printed with its ``#>``
    lines."""
    if skipped(example):
        ast.parse(example.source, filename=_id(example))
        return
    capsys.readouterr()
    run_block(example)
    shown = OUTPUT.findall(example.source)
    if shown:
        assert capsys.readouterr().out.splitlines() == shown, f"{_id(example)} printed"


@pytest.fixture
def standalone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A fresh working directory (for the files a block writes: runs.db, chat.db), the
    host's keys and endpoints out of the environment, and the logging set-up a block
    changes put back afterwards."""
    monkeypatch.chdir(tmp_path)
    for name in list(os.environ):
        if name.endswith(("_API_KEY", "_AUTH_TOKEN", "_BASE_URL")):
            monkeypatch.delenv(name)
    manager = logging.Logger.manager
    levels = {name: logging.getLogger(name).level for name in list(manager.loggerDict)}
    root = (logging.root.level, list(logging.root.handlers))
    yield
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)
    logging.root.setLevel(root[0])
    logging.root.handlers[:] = root[1]


@pytest.mark.parametrize("example", BLOCKS, ids=_id)
@pytest.mark.usefixtures("standalone")
def test_block_runs(example: CodeExample, capsys: pytest.CaptureFixture[str]) -> None:
    """The block runs as a user would paste it into a file of their own, and prints
    what its ``#>`` lines say; a fragment parses."""
    check_block(example, capsys)


def test_a_wrong_output_or_a_broken_block_fails(capsys: pytest.CaptureFixture[str]) -> None:
    """The check can fail: a block printing other than its ``#>`` lines, and a block that
    raises, each fail, the error naming the page's own line; a fragment is not run."""
    page = ROOT / "docs" / "example.md"
    wrong = CodeExample.create('print("model_complete")\n#> failed\n', path=page, start_line=9)
    with pytest.raises(AssertionError, match=r"docs/example\.md:9 printed"):
        check_block(wrong, capsys)
    broken = CodeExample.create("x = 1\nx.missing\n", path=page, start_line=20)
    with pytest.raises(AttributeError) as raised:
        check_block(broken, capsys)
    assert raised.traceback[-1].lineno + 1 == 22  # the page's line (0-based in pytest)
    fragment = CodeExample.create("run(prompt)\n", path=page, prefix='python {test="skip"}')
    check_block(fragment, capsys)


def test_every_python_fence_is_collected() -> None:
    """No Python block escapes the run: each page's ```python fences, counted line by
    line, are the blocks collected from it."""
    for page in pages():
        collected = [e for e in BLOCKS if e.path == page]
        assert len(collected) == len(python_fences(page)), page


def test_fence_settings_are_known() -> None:
    """A fence setting is one the collector acts on (a misspelt ``{test="skp"}`` would
    otherwise run a fragment, or hide a block)."""
    for example in BLOCKS:
        for key, value in example.prefix_settings().items():
            assert value in SETTINGS.get(key, set()), f"{_id(example)}: {key}={value!r}"
