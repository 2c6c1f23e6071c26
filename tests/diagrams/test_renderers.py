from __future__ import annotations

import os
from pathlib import Path

import pytest

from innerloop.diagrams import GraphvizNotFound, build_diagram, render, to_dot, to_mermaid
from innerloop.fsm import DEFAULT_SPEC

X = "\N{MULTIPLICATION SIGN}"


class TestDot:
    def test_recovery_edges_differ(self) -> None:
        """Recovery edges are dashed orange, happy ones black, exits green."""
        dot = to_dot(build_diagram(DEFAULT_SPEC))
        assert (
            '\tnormalize -> call [color="#222222" fontcolor="#222222" '
            'tooltip="normalize -> call" weight=8]' in dot
        )
        assert (
            '\tbackoff -> call [label="2. else" color="#d35400" fontcolor="#d35400" '
            'style=dashed tooltip="backoff -> call" weight=1]' in dot
        )
        assert 'check -> model_complete [label="5. model_finished" color="#2e7d32"' in dot

    def test_finals_show_exit_reason(self) -> None:
        """Final states are doubled boxes labelled with their exit reason."""
        dot = to_dot(build_diagram(DEFAULT_SPEC))
        assert 'budget_exceeded [label="budget_exceeded\nexit: budget_exceeded"' in dot
        assert "peripheries=2" in dot

    def test_trace_overlay(self, run_events: list[dict[str, object]]) -> None:
        """A trace shows counts, greys what was never used and draws the exit path blue."""
        dot = to_dot(build_diagram(DEFAULT_SPEC, trace=run_events))
        assert f'normalize -> call [label="{X}2" color="#1565c0"' in dot
        assert f'stream -> execute [label="9. has_tool_calls {X}1" color="#222222"' in dot
        assert 'fallback [label=fallback color="#c8c8c8"' in dot
        assert "innerloop (run: 13 transitions, exit model_complete)" in dot

    def test_current_state(self) -> None:
        """A live state is filled yellow and marked (current)."""
        dot = to_dot(build_diagram(DEFAULT_SPEC, current="backoff"))
        assert 'backoff [label="backoff\n(current)"' in dot
        assert 'fillcolor="#ffe066"' in dot


class TestImages:
    def test_svg_and_png(self) -> None:
        """SVG carries the DOT hash; PNG is a PNG."""
        svg = render(build_diagram(DEFAULT_SPEC), "svg")
        assert b"innerloop-dot-sha256: " in svg
        assert b"<svg" in svg
        assert render(build_diagram(DEFAULT_SPEC), "png").startswith(b"\x89PNG")

    def test_missing_binary(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """Without 'dot' on PATH the error names the Debian and Homebrew packages."""
        monkeypatch.setenv("PATH", str(tmp_path))
        with pytest.raises(GraphvizNotFound) as err:
            render(build_diagram(DEFAULT_SPEC), "png")
        assert str(err.value) == (
            "rendering PNG needs the Graphviz 'dot' binary, which was not found on PATH; "
            "install it with 'apt-get install graphviz' (Debian/Ubuntu package graphviz) or "
            "'brew install graphviz' (macOS Homebrew), or ask for DOT or Mermaid text, which "
            "need no binary"
        )
        assert os.environ["PATH"] == str(tmp_path)
        assert to_dot(build_diagram(DEFAULT_SPEC)).startswith("// innerloop machine")


class TestMermaid:
    def test_default_text(self) -> None:
        """Mermaid marks recovery edges with ↺ and exits with ⏹, classes the states and
        describes final states by their exit reason."""
        text = to_mermaid(build_diagram(DEFAULT_SPEC))
        assert text.startswith("stateDiagram-v2\n    %% machine: innerloop\n")
        assert "    call --> abort : ↺ 1. abort_requested, 8. else\n" in text
        assert "    check --> tasks_complete : ⏹ 6. tasks_complete\n" in text
        assert "    stream --> execute : 9. has_tool_calls\n" in text
        assert "    failed : exit_reason = failed\n" in text
        assert "    class compact,repair,backoff,fallback,abort recovery\n" in text

    def test_trace_and_current(self, run_events: list[dict[str, object]]) -> None:
        """With a trace, counts and ★ on the exit path; the end state is classed 'ended'."""
        text = to_mermaid(build_diagram(DEFAULT_SPEC, trace=run_events))
        assert f"    check --> model_complete : ★ ⏹ 5. model_finished {X}1\n" in text
        assert f"    check --> assemble : 7. else {X}1\n" in text
        assert "    class model_complete ended\n" in text
        live = to_mermaid(build_diagram(DEFAULT_SPEC, current="call"))
        assert "    class call current\n" in live
