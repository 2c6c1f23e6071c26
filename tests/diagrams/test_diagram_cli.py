from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from innerloop.cli import main
from innerloop.diagrams import build_diagram, to_dot, to_mermaid
from innerloop.diagrams._files import stale_files
from innerloop.examples import example_specs
from innerloop.fsm import DEFAULT_SPEC

REPO_DIAGRAMS = Path(__file__).resolve().parents[2] / "diagrams"


class TestCommand:
    def test_dot_to_stdout(self, capsys: pytest.CaptureFixture[str]) -> None:
        """--format dot prints the default machine's DOT."""
        assert main(["diagram", "--format", "dot"]) == 0
        assert capsys.readouterr().out == to_dot(build_diagram(DEFAULT_SPEC))

    def test_format_from_suffix(self, tmp_path: Path) -> None:
        """-o FILE.mmd writes Mermaid without --format."""
        out = tmp_path / "m.mmd"
        assert main(["diagram", "-o", str(out)]) == 0
        assert out.read_text() == to_mermaid(build_diagram(DEFAULT_SPEC))

    def test_png_file(self, tmp_path: Path) -> None:
        """--format png -o writes a PNG."""
        out = tmp_path / "m.png"
        assert main(["diagram", "--format", "png", "-o", str(out)]) == 0
        assert out.read_bytes().startswith(b"\x89PNG")

    def test_trace(self, tmp_path: Path, run_events: list[dict[str, object]]) -> None:
        """--trace lays a JSONL run over the machine."""
        log = tmp_path / "run.jsonl"
        log.write_text("\n".join(json.dumps(e) for e in run_events))
        out = tmp_path / "run.dot"
        assert main(["diagram", "--trace", str(log), "-o", str(out)]) == 0
        trace = build_diagram(DEFAULT_SPEC).with_trace(run_events)
        assert out.read_text() == to_dot(trace)

    def test_bad_spec_message(self, capsys: pytest.CaptureFixture[str]) -> None:
        """A --spec that is not a spec fails with a message saying what it got."""
        assert main(["diagram", "--spec", "innerloop.examples:DENIED"]) == 1
        assert capsys.readouterr().err == (
            "innerloop diagram: --spec: innerloop.examples:DENIED: expected a MachineSpec or "
            "CompiledMachine, got str; name a MachineSpec or CompiledMachine, or a function of "
            "no argument that returns one\n"
        )

    def test_spec_attribute(self, tmp_path: Path) -> None:
        """--spec accepts a dotted attribute path to a MachineSpec."""
        out = tmp_path / "d.dot"
        assert main(["diagram", "--spec", "innerloop.fsm:DEFAULT_SPEC", "-o", str(out)]) == 0
        assert out.read_text() == to_dot(build_diagram(DEFAULT_SPEC))

    def test_missing_dot_binary(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Without 'dot' on PATH, svg fails with exit 1 naming the package; dot still works."""
        monkeypatch.setenv("PATH", str(tmp_path))
        assert main(["diagram", "--format", "svg"]) == 1
        assert "apt-get install graphviz" in capsys.readouterr().err
        assert main(["diagram", "--format", "mermaid"]) == 0

    def test_write_all(self, tmp_path: Path) -> None:
        """--write-all writes the default machine and the examples, all fresh."""
        assert main(["diagram", "--write-all", str(tmp_path)]) == 0
        assert sorted(p.name for p in tmp_path.iterdir()) == [
            "examples", "innerloop.dot", "innerloop.mmd", "innerloop.svg",
        ]  # fmt: skip
        assert stale_files(build_diagram(DEFAULT_SPEC), tmp_path) == []


class TestRepositoryDiagrams:
    def test_default_machine_fresh(self) -> None:
        """diagrams/ holds the current default machine; run 'make diagrams' if this fails."""
        assert stale_files(build_diagram(DEFAULT_SPEC), REPO_DIAGRAMS) == []

    @pytest.mark.parametrize("name", list(example_specs()))
    def test_examples_fresh(self, name: str) -> None:
        """diagrams/examples/ holds each example machine; run 'make diagrams' if this fails."""
        spec = example_specs()[name]
        assert stale_files(build_diagram(spec), REPO_DIAGRAMS / "examples", name) == []

    def test_stale_detected(self, tmp_path: Path) -> None:
        """A changed DOT, Mermaid or SVG file is reported with its reason."""
        diagram = build_diagram(DEFAULT_SPEC)
        main(["diagram", "--write-all", str(tmp_path)])
        (tmp_path / "innerloop.mmd").write_text("stateDiagram-v2\n")
        svg = tmp_path / "innerloop.svg"
        svg.write_text(svg.read_text().replace("innerloop-dot-sha256: ", "innerloop-dot-sha256: 0"))
        (tmp_path / "innerloop.dot").unlink()
        assert stale_files(diagram, tmp_path) == [
            f"{tmp_path}/innerloop.dot: missing",
            f"{tmp_path}/innerloop.mmd: differs from the machine",
            f"{tmp_path}/innerloop.svg: rendered from another DOT source",
        ]


def test_readme_diagram_fresh() -> None:
    """The machine page's diagram section (docs/concepts/machine.md) shows the current
    default machine in Mermaid."""
    page = REPO_DIAGRAMS.parent / "docs" / "concepts" / "machine.md"
    text = page.read_text(encoding="utf-8")
    section = text[text.index("\n## The diagram\n") :]
    block = section[section.index("```mermaid\n") + len("```mermaid\n") :]
    fresh = to_mermaid(build_diagram(DEFAULT_SPEC))
    assert block[: block.index("```\n")] == fresh, (
        "copy diagrams/innerloop.mmd into docs/concepts/machine.md"
    )


def test_spec_module_in_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--spec finds a module in the current directory even when it is not on sys.path (as
    under the installed `innerloop` script), and leaves sys.path as it was."""
    module = f"my_machines_{tmp_path.name}"
    (tmp_path / f"{module}.py").write_text(
        "from innerloop.fsm import DEFAULT_SPEC\nSPEC = DEFAULT_SPEC.renamed('mine')\n"
    )
    monkeypatch.chdir(tmp_path)
    here = [p for p in sys.path if os.path.abspath(p or os.curdir) == str(tmp_path)]
    for entry in here:
        monkeypatch.setattr(sys, "path", [p for p in sys.path if p != entry])
    path_before = list(sys.path)
    assert main(["diagram", "--spec", f"{module}:SPEC", "--format", "mermaid"]) == 0
    assert capsys.readouterr().out.startswith("stateDiagram-v2\n    %% machine: mine\n")
    assert sys.path == path_before
    monkeypatch.delitem(sys.modules, module)
