from __future__ import annotations

import pytest

RUN = [
    ("idle", "assemble", None),
    ("assemble", "normalize", None),
    ("normalize", "call", None),
    ("call", "call", "transient_retry"),
    ("call", "stream", "call_opened"),
    ("stream", "execute", "has_tool_calls"),
    ("execute", "check", None),
    ("check", "assemble", None),
    ("assemble", "normalize", None),
    ("normalize", "call", None),
    ("call", "stream", "call_opened"),
    ("stream", "check", None),
    ("check", "model_complete", "model_finished"),
]


@pytest.fixture
def run_events() -> list[dict[str, object]]:
    """The event dicts of a run with a retry, a tool turn and a final answer."""
    out: list[dict[str, object]] = [{"type": "text_delta", "index": 0, "text": "hi"}]
    out += [{"type": "transition", "source": s, "target": t, "guard": g} for s, t, g in RUN]
    out.append(
        {"type": "finished", "exit_reason": "model_complete", "final_state": "model_complete"}
    )
    return out
