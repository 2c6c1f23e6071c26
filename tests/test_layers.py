"""The package's import graph: no two modules import each other, directly or in a circle,
and the import-linter contracts of pyproject.toml (the layers) hold."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parent.parent


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    found: dict[frozenset[str], list[str]] = {}
    for module in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            chain = graph.find_shortest_chain(importer=imported, imported=module)
            if chain is not None:
                cycle = [module, *chain]
                found.setdefault(frozenset(cycle), cycle)
    return list(found.values())


def test_no_import_cycles() -> None:
    """TYPE_CHECKING and function-level imports count too: a cycle there is a cycle in
    the design."""
    graph = grimp.build_graph("innerloop")
    cycles = [" -> ".join(c) for c in _cycles(graph)]
    assert cycles == [], "import cycles:\n" + "\n".join(cycles)


def test_the_cycle_finder_finds_a_cycle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above can fail: a package of two modules importing each other."""
    pkg = tmp_path / "cyclic_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from cyclic_pkg import b\n")
    (pkg / "b.py").write_text("from cyclic_pkg import a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    cycles = _cycles(grimp.build_graph("cyclic_pkg"))
    assert [set(c) for c in cycles] == [{"cyclic_pkg.a", "cyclic_pkg.b"}]


def test_import_linter_contracts_hold() -> None:
    lint_imports = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert lint_imports is not None, "install the dev extra: pip install -e '.[dev]'"
    done = subprocess.run(
        [lint_imports, "--no-cache"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
