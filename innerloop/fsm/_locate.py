"""A run's machine: what a run records of it, and finding it again later.

Every run records its machine as a :class:`MachineRecord` (the name, the spec's
fingerprint, its import path when the spec has one, and in a checkpoint store its whole
signature). Whoever reads the run later (``Harness.resume`` and ``fork``, ``innerloop
runs show``, ``innerloop ui``, ``innerloop diagram --trace``) checks or finds the machine
through it, and says so in one line when it cannot, never drawing or resuming a run on
another machine in silence.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import attrs

from innerloop.fsm._compile import CompiledMachine
from innerloop.fsm._default import DEFAULT_SPEC
from innerloop.fsm._spec import MachineSpec, fingerprint_of

__all__ = ["MachineNotFound", "MachineRecord", "find_machine", "import_target", "load_spec"]


class MachineNotFound(ValueError):
    """The machine a run recorded cannot be found among the specs at hand."""


@attrs.frozen
class MachineRecord:
    """What a run records of the machine it ran on."""

    name: str
    fingerprint: str
    import_path: str | None = None
    signature: Mapping[str, Any] | None = attrs.field(default=None, eq=False)
    """The spec's :meth:`~innerloop.fsm.MachineSpec.signature` (kept by checkpoint
    stores; an event log keeps the three fields above)."""

    @classmethod
    def of(cls, machine: MachineSpec | CompiledMachine) -> MachineRecord:
        spec = machine.spec if isinstance(machine, CompiledMachine) else machine
        signature = spec.signature()
        return cls(spec.name, fingerprint_of(signature), spec.import_path, signature)

    def columns(self) -> tuple[str, str | None, str | None]:
        """``(fingerprint, import_path, signature JSON)`` as a store keeps them."""
        signature = None if self.signature is None else json.dumps(self.signature)
        return self.fingerprint, self.import_path, signature

    @classmethod
    def from_columns(
        cls, name: str, fingerprint: str | None, import_path: str | None, signature: str | None
    ) -> MachineRecord | None:
        """The record a store's row holds (None for a run stored before runs recorded
        their machine)."""
        if fingerprint is None:
            return None
        parsed = None if signature is None else json.loads(signature)
        return cls(name, fingerprint, import_path, parsed)

    @classmethod
    def from_events(cls, events: Sequence[Mapping[str, Any]]) -> MachineRecord | None:
        """The record a run's logged events open with (its ``run_started`` event); None
        for a run logged before runs recorded their machine."""
        first = events[0] if events else {}
        name, fingerprint, path = (first.get(k) for k in ("machine", "fingerprint", "import_path"))
        if first.get("type") != "run_started" or not isinstance(name, str):
            return None
        if not isinstance(fingerprint, str):
            return None
        return cls(name, fingerprint, path if isinstance(path, str) else None)

    def __str__(self) -> str:
        where = f", import path {self.import_path}" if self.import_path else ""
        return f"machine {self.name!r} (fingerprint {self.fingerprint}{where})"

    def matches(self, machine: MachineSpec | CompiledMachine) -> bool:
        """The machine has this record's name and fingerprint."""
        spec = machine.spec if isinstance(machine, CompiledMachine) else machine
        fingerprint = (
            machine.fingerprint if isinstance(machine, CompiledMachine) else spec.fingerprint
        )
        return spec.name == self.name and fingerprint == self.fingerprint

    def missing_from(self, machine: MachineSpec | CompiledMachine) -> list[str]:
        """What of the recorded machine ``machine`` lacks or has otherwise: states,
        transitions, and the handlers and guards by their ``module:qualname`` (empty when
        the record keeps no signature, or when nothing differs)."""
        if self.signature is None:
            return []
        spec = machine.spec if isinstance(machine, CompiledMachine) else machine
        now, then = spec.signature(), self.signature
        problems: list[str] = []
        states = {s[0] for s in now["states"]}
        problems += [f"state {s[0]!r}" for s in then["states"] if s[0] not in states]
        edges = {tuple(t[:3]) for t in now["transitions"]}
        problems += [
            f"transition {t[0]} -> {t[1]}" + (f" [{t[2]}]" if t[2] else "")
            for t in then["transitions"]
            if tuple(t[:3]) not in edges
        ]
        for kind in ("handlers", "guards"):
            for name, fn in then[kind].items():
                here = now[kind].get(name)
                if here != fn:
                    what = "handler of state" if kind == "handlers" else "guard"
                    got = f"this machine has {here}" if here else "this machine has none"
                    problems.append(f"{what} {name!r} ({fn}; {got})")
        return problems


@contextlib.contextmanager
def _cwd_on_path() -> Iterator[None]:
    """The current directory on ``sys.path`` for the block, as ``python -m`` would have it
    (the ``innerloop`` script's own directory is there instead)."""
    cwd = os.getcwd()
    if any(os.path.abspath(entry or os.curdir) == cwd for entry in sys.path):
        yield
        return
    sys.path.insert(0, cwd)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(cwd)


def import_target(
    target: str, what: str, option: str, example: str, kinds: tuple[type, ...] | None
) -> Any:
    """The object ``module:attr`` names (attr may be dotted; the module may sit in the
    current directory), called when it is a function of no argument that is none of
    ``kinds`` (never called when ``kinds`` is None). ``ValueError`` names ``what`` was
    wanted, ``option`` and ``example``."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"{option} expects MODULE:ATTR (e.g. {example}), got {target!r}")
    try:
        with _cwd_on_path():
            obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"cannot load the {what} {target}: {exc}") from None
    if kinds is not None and callable(obj) and not isinstance(obj, kinds):
        try:
            obj = obj()
        except TypeError as exc:
            raise ValueError(
                f"{target} is a function that needs arguments ({exc}); name a {what}, or a "
                "function that takes none"
            ) from None
    return obj


def load_spec(target: str) -> MachineSpec:
    """The spec named by ``module:attr`` (attr may be dotted): a MachineSpec, a
    CompiledMachine, or a function taking no argument that returns one. The module may
    also sit in the current directory. The spec comes back with ``target`` as its
    import path unless it names one itself. ``ValueError`` says what is wrong."""
    obj = import_target(
        target, "machine", "--spec", "mypkg.machines:SPEC", (MachineSpec, CompiledMachine)
    )
    if isinstance(obj, CompiledMachine):
        obj = obj.spec
    if not isinstance(obj, MachineSpec):
        raise ValueError(
            f"--spec {target}: expected a MachineSpec or CompiledMachine, got {type(obj).__name__}"
        )
    return obj if obj.import_path else obj.with_import_path(target)


def _unrecorded(specs: tuple[MachineSpec, ...], what: str) -> MachineSpec:
    if len(specs) > 1:
        raise MachineNotFound(
            f"{what} recorded no machine (written by an older innerloop) and several "
            "--spec were given; pass the one it ran on"
        )
    return specs[0] if specs else DEFAULT_SPEC


def find_machine(
    record: MachineRecord | None, specs: Iterable[MachineSpec] = (), *, what: str = "the run"
) -> MachineSpec:
    """The machine ``record`` names: among ``specs`` (by name and fingerprint), else
    imported from the record's import path (and checked), else the default machine when
    the record is the default machine's. :class:`MachineNotFound` says in one line why
    not, and what to pass. A run that recorded nothing (written before runs recorded
    their machine) gets the one spec given, else the default machine."""
    specs = tuple(specs)
    if record is None:
        return _unrecorded(specs, what)
    for spec in specs:
        if record.matches(spec):
            return spec
    problem = ""
    if record.import_path:
        try:
            spec = load_spec(record.import_path)
        except ValueError as exc:
            problem = f"; {exc}"
        else:
            if record.matches(spec):
                return spec
            problem = (
                f"; {record.import_path} is now machine {spec.name!r} (fingerprint "
                f"{spec.fingerprint}): the spec changed since the run"
            )
    if record.matches(DEFAULT_SPEC):
        return DEFAULT_SPEC
    given = ", ".join(f"{s.name!r} ({s.fingerprint})" for s in specs)
    tried = f"; the --spec given: {given}" if given else ""
    raise MachineNotFound(
        f"{what} ran on {record}, which is not at hand{problem}{tried}; pass "
        "--spec MODULE:ATTR naming that spec"
    )


def add_spec_option(parser: argparse.ArgumentParser, help: str) -> None:
    """The command line's ``--spec MODULE:ATTR`` (repeatable; each read by
    :func:`load_spec`), with the ``help`` of the command that takes it."""
    parser.add_argument("--spec", metavar="MODULE:ATTR", action="append", default=[], help=help)
