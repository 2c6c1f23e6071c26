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
import inspect
import json
import os
import re
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import attrs

from innerloop.fsm._compile import CompiledMachine
from innerloop.fsm._default import DEFAULT_SPEC
from innerloop.fsm._spec import MachineSpec, fingerprint_of

__all__ = [
    "MachineNotFound",
    "MachineRecord",
    "find_machine",
    "import_target",
    "load_spec",
    "recorded_hint",
]


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

    def described(self) -> str:
        """``machine 'name' (fingerprint f)``, in one line whatever the record holds."""
        fingerprint = self.fingerprint
        if not fingerprint.isalnum() or len(fingerprint) > 64:
            fingerprint = repr(fingerprint[:64])
        return f"machine {self.name[:200]!r} (fingerprint {fingerprint})"

    def __str__(self) -> str:
        path = self.import_path
        if path:
            shown = path if _TARGET.match(path) else repr(path[:200])
            return f"{self.described()[:-1]}, import path {shown})"
        return self.described()

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
def _cwd_searched_last() -> Iterator[None]:
    """The current directory on ``sys.path`` for the block, searched after every other
    entry: a module named on the command line may sit there (as with ``python -m``), but a
    file beside it never shadows an installed module."""
    cwd = os.getcwd()
    if any(os.path.abspath(entry or os.curdir) == cwd for entry in sys.path):
        yield
        return
    sys.path.append(cwd)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(cwd)


_TARGET = re.compile(r"[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*\Z")
"""``module:attr`` as Python names spell it (attr may be dotted)."""


def _one_line(exc: BaseException) -> str:
    """An exception as ``Type: first line``."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def _where(exc: SyntaxError) -> str:
    return f" ({exc.filename}, line {exc.lineno})" if exc.filename else ""


def import_target(
    target: str, what: str, option: str, example: str, kinds: tuple[type, ...]
) -> Any:
    """The object ``module:attr`` names (attr may be dotted; the module may sit in the
    current directory, which is searched last). Only for a target the user named (in code
    or on the command line): a file's text never reaches here.

    When the object is none of ``kinds``, it is called only if it is a Python function
    (``def`` or ``lambda``) that takes no argument, and what it returns must be one of
    ``kinds`` (a builtin or a class is never called). Every failure is a
    ``ValueError`` in one line naming ``target``, the ``what`` wanted, ``option`` and
    ``example``: a bad spelling, a module that cannot be imported or raises (its syntax
    error's file and line), a missing attribute, an object of another type, a function
    that needs arguments or raises."""
    if not _TARGET.match(target):
        raise ValueError(f"{option} expects MODULE:ATTR (e.g. {example}), got {target!r}")
    module_name, _, attr = target.partition(":")
    obj = _module(module_name, f"cannot load the {what} {target}")
    try:
        for part in attr.split("."):
            obj = getattr(obj, part)
    except Exception as exc:  # no such attribute, or a module __getattr__ that raised
        said = _one_line(exc)
        said = said.partition(": ")[2] or said if isinstance(exc, AttributeError) else said
        raise ValueError(f"cannot load the {what} {target}: {said}") from None
    if isinstance(obj, kinds):
        return obj
    return _made_by(obj, target, kinds)


def _module(name: str, problem: str) -> Any:
    """The module ``name`` imported; a one-line ``ValueError`` starting with ``problem``
    when it cannot be (not found, a syntax error, an exception raised while it ran)."""
    try:
        with _cwd_searched_last():
            return importlib.import_module(name)
    except ImportError as exc:  # not found (or an import inside it failed): its own words
        raise ValueError(f"{problem}: {_one_line(exc).partition(': ')[2] or exc}") from None
    except SyntaxError as exc:
        raise ValueError(
            f"{problem}: module {name} has a syntax error{_where(exc)}: {exc.msg}"
        ) from None
    except Exception as exc:  # the user's module raised while imported: say it in a line
        raise ValueError(f"{problem}: importing {name} raised {_one_line(exc)}") from None


def _made_by(obj: Any, target: str, kinds: tuple[type, ...]) -> Any:
    """What ``obj`` makes when it is a Python function of no argument (nothing else is
    called: not a builtin, nor a class), checked to be one of ``kinds``."""
    wanted = " or ".join(k.__name__ for k in kinds)
    fix = f"name a {wanted}, or a function of no argument that returns one"
    if not inspect.isfunction(obj):
        raise ValueError(f"{target}: expected a {wanted}, got {type(obj).__name__}; {fix}")
    try:
        inspect.signature(obj).bind()
    except TypeError as exc:
        raise ValueError(f"{target} is a function that needs arguments ({exc}); {fix}") from None
    try:
        made = obj()
    except Exception as exc:
        raise ValueError(f"{target}() raised {_one_line(exc)}") from None
    if not isinstance(made, kinds):
        raise ValueError(f"{target}() returned a {type(made).__name__}, not a {wanted}; {fix}")
    return made


def load_spec(target: str) -> MachineSpec:
    """The spec named by ``module:attr`` (attr may be dotted), a target the user names:
    a MachineSpec, a CompiledMachine, or a function taking no argument that returns one.
    The module may also sit in the current directory. The spec comes back with
    ``target`` as its import path unless it names one itself. ``ValueError`` says what
    is wrong, in one line."""
    obj = import_target(
        target, "machine", "--spec", "mypkg.machines:SPEC", (MachineSpec, CompiledMachine)
    )
    spec: MachineSpec = obj.spec if isinstance(obj, CompiledMachine) else obj
    return spec if spec.import_path else spec.with_import_path(target)


def _unrecorded(specs: tuple[MachineSpec, ...], what: str) -> MachineSpec:
    if len(specs) > 1:
        raise MachineNotFound(
            f"{what} recorded no machine (written by an older innerloop) and several "
            "--spec were given; pass the one it ran on"
        )
    return specs[0] if specs else DEFAULT_SPEC


def recorded_hint(import_path: str | None) -> str:
    """The ``--spec`` to pass for a recorded import path, as text to show (never to
    import): the path when it is spelled ``module:attr``, else ``MODULE:ATTR``."""
    if import_path and _TARGET.match(import_path):
        return import_path
    return "MODULE:ATTR"


def find_machine(
    record: MachineRecord | None, specs: Iterable[MachineSpec] = (), *, what: str = "the run"
) -> MachineSpec:
    """The machine ``record`` names, among ``specs`` (by name and fingerprint), else the
    default machine when the record is the default machine's. A record is data: its
    import path is never imported, only shown in the error as the ``--spec`` to pass.
    :class:`MachineNotFound` says in one line why not, and what to pass. A run that
    recorded nothing (written before runs recorded their machine) gets the one spec
    given, else the default machine."""
    specs = tuple(specs)
    if record is None:
        return _unrecorded(specs, what)
    for spec in specs:
        if record.matches(spec):
            return spec
    if record.matches(DEFAULT_SPEC):
        return DEFAULT_SPEC
    given = ", ".join(f"{s.name!r} ({s.fingerprint})" for s in specs)
    tried = f"; the --spec given: {given}" if given else ""
    hint = recorded_hint(record.import_path)
    made = (
        f"; it was made by the spec at {hint} (a file is data: that path is not imported)"
        if hint != "MODULE:ATTR"
        else ""
    )
    raise MachineNotFound(
        f"{what} ran on {record.described()}, which is not at hand{made}{tried}; pass "
        f"--spec {hint} naming that spec"
    )


def add_spec_option(parser: argparse.ArgumentParser, help: str) -> None:
    """The command line's ``--spec MODULE:ATTR`` (repeatable; each read by
    :func:`load_spec`), with the ``help`` of the command that takes it."""
    parser.add_argument("--spec", metavar="MODULE:ATTR", action="append", default=[], help=help)
