"""The JavaScript examples of the protocol pages are the scripts the tests run under node
(tests/serve/node/): a page shows what is tested, word for word."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
JS = re.compile(r"```js\n(.*?)```", re.S)


@pytest.mark.parametrize(
    ("page", "script"),
    [("serve-ag-ui.md", "ag_ui_chat.mjs"), ("serve-ai-sdk.md", "ai_sdk_chat.mjs")],
)
def test_a_pages_javascript_is_the_tested_script(page: str, script: str) -> None:
    shown = JS.findall((ROOT / "docs" / "guides" / page).read_text(encoding="utf-8"))
    assert shown == [(ROOT / "tests" / "serve" / "node" / script).read_text(encoding="utf-8")]
