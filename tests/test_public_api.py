"""The public surface: explicit, sorted __all__ lists whose names all exist."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

import innerloop

PACKAGES = [
    "innerloop",
    "innerloop.events",
    "innerloop.fsm",
    "innerloop.providers",
    "innerloop.tools",
    "innerloop.recovery",
    "innerloop.diagrams",
    "innerloop.testing",
    "innerloop.durable",
    "innerloop.examples",
    "innerloop.lowlevel",
    "innerloop.checkpoint",
    "innerloop.observe",
    "innerloop.ui",
    "innerloop.evals",
    "innerloop.local",
    "innerloop.serve",
]


@pytest.mark.parametrize("name", PACKAGES)
def test_all_is_sorted_and_resolves(name: str) -> None:
    """Every package lists its public names, sorted, and each one exists."""
    module = importlib.import_module(name)
    exported = list(module.__all__)
    assert exported == sorted(exported, key=lambda s: (not s.isupper(), s))
    for item in exported:
        assert hasattr(module, item), f"{name}.{item} is listed in __all__ but missing"


def test_ships_py_typed() -> None:
    """The package is typed (PEP 561)."""
    assert (Path(innerloop.__file__).parent / "py.typed").exists()


def test_errors_subclass_the_builtins_callers_catch() -> None:
    """Programmer errors are ValueErrors; every error is an InnerloopError."""
    for cls in (innerloop.ParamsError, innerloop.SpecError, innerloop.ToolDefinitionError):
        assert issubclass(cls, ValueError)
        assert issubclass(cls, innerloop.InnerloopError)
    assert issubclass(innerloop.ProviderError, innerloop.InnerloopError)
