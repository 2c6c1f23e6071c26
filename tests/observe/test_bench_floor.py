"""bench/overhead.py's SDK floor makes what a traced run records, so the floor it reports
is the SDK's own cost of tracing's data (its figures are the bench's, not a timed test's)."""

from __future__ import annotations

import asyncio
import importlib.util
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

BENCH = Path(__file__).resolve().parents[2] / "bench" / "overhead.py"


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("overhead_bench", BENCH)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _recorded(bench: ModuleType, runner: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The spans one three-iteration run of ``runner`` leaves in an in-memory exporter."""
    exporter = InMemorySpanExporter()
    tracers = TracerProvider()
    tracers.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(bench, "_sdk", lambda: (tracers, MeterProvider(), exporter))
    assert asyncio.run(getattr(bench, runner)()(3)) == 4
    return exporter.get_finished_spans()


def test_the_floor_records_what_a_traced_run_records(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same spans with the same attribute keys (the floor also has the response id,
    which real providers send and the bench's fake one does not), and the transition
    events of the iterations (a run's first and last transitions aside)."""
    bench = _bench()
    traced = _recorded(bench, "traced_runner", monkeypatch)
    floor = _recorded(bench, "sdk_floor_runner", monkeypatch)

    def kinds(spans: Any) -> Counter[tuple[str, frozenset[str]]]:
        return Counter(
            (s.name.split()[0], frozenset(s.attributes or {}))
            for s in spans
            if not s.name.startswith("invoke_agent")
        )

    expected = Counter(
        {
            (name, keys | {"gen_ai.response.id"} if name == "chat" else keys): n
            for (name, keys), n in kinds(traced).items()
        }
    )
    assert kinds(floor) == expected
    assert sorted(n for n, _ in expected) == ["chat", "execute_tool"]

    def transitions(spans: Any) -> int:
        (agent,) = [s for s in spans if s.name.startswith("invoke_agent")]
        return sum(1 for e in agent.events if e.name == "transition")

    assert transitions(floor) == transitions(traced) - 2


def test_the_summary_floor_records_the_turn_events(monkeypatch: pytest.MonkeyPatch) -> None:
    """With transitions="summary" the floor makes one turn event per iteration, as the
    traced run does, with the same attribute keys."""
    bench = _bench()
    traced = _recorded(bench, "innerloop_traced_summary", monkeypatch)
    floor = _recorded(bench, "sdk_floor_summary", monkeypatch)

    def turns(spans: Any) -> list[frozenset[str]]:
        (agent,) = [s for s in spans if s.name.startswith("invoke_agent")]
        assert not [e for e in agent.events if e.name == "transition"]
        return [frozenset(e.attributes or {}) for e in agent.events if e.name == "turn"]

    assert len(turns(floor)) == len(turns(traced)) == 4
    assert set(turns(floor)) == set(turns(traced))
