"""Mutation testing of the modules that decide a run's route: `make mutation`.

Each mutant is one small change made on the module's syntax tree (a comparison or boolean
operator turned, a number or flag changed, a member removed from a set, list or tuple
literal, two neighbours of a list or tuple swapped, ``max`` turned into ``min``; in the
``WIDER`` modules also ``+`` against ``-``, a call or a write to an attribute or item
deleted, a returned value replaced by None), run against that module's test files with
``pytest -x -q`` in a fresh interpreter. The mutated module is served in place of the file
on disk by an import hook that a ``sitecustomize`` installs, so the tree is never written
and the test's own subprocesses import the mutant too. A failing (or hanging) test kills the mutant.

    python bench/mutation.py                      # every module, sampled, seed 22
    python bench/mutation.py --sample 0           # every mutant
    python bench/mutation.py --module _clock --line 30 --list

Docstrings, annotations, ``Literal[...]`` types (an alias such as
``CheckpointEvery = Literal["transition", "turn", "final"]`` is a type: a mutant of it
changes nothing at run time), f-strings and ``__all__`` are left alone, and so is the order
of the tables in ``UNORDERED``, of the members of a literal tested with ``in``, and of an
``isinstance`` or ``except`` tuple; the mutants in ``EQUIVALENT`` (each with why no
behaviour can tell it) are drawn but not run. With ``--sample N``
at most N mutants are drawn per module, uniformly with ``random.Random(f"{seed}:{module}")``,
so a seed names one sample.
"""

from __future__ import annotations

import argparse
import ast
import copy
import importlib
import os
import random
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn, cast

import attrs
import pytest

ROOT = Path(__file__).resolve().parent.parent
KILLS = "tests/test_mutation_kills.py"
_RECOVERY = ("tests/recovery/test_scenarios.py",)
_EVALS = (
    "tests/test_mutation_kills_evals.py",
    "tests/test_mutation_kills_eval_runs.py",
    "tests/evals/test_evals.py",
    "tests/evals/test_hostile_datasets.py",
)

# Each module, and the test files that speak for it (the kills file first: it is fast).
MODULES: dict[str, tuple[str, ...]] = {
    "innerloop/recovery/_policy.py": (
        KILLS,
        "tests/recovery/test_retry_after.py",
        *_RECOVERY,
        "tests/fsm/test_params.py",
    ),
    "innerloop/recovery/_clock.py": (KILLS, *_RECOVERY),
    "innerloop/recovery/_pricing.py": (KILLS, "tests/recovery/test_pricing.py"),
    "innerloop/recovery/_tokens.py": (KILLS, "tests/recovery/test_tokens.py"),
    "innerloop/recovery/_compaction.py": (
        KILLS,
        "tests/recovery/test_compaction.py",
        "tests/recovery/test_compaction_properties.py",
        *_RECOVERY,
    ),
    "innerloop/recovery/_diagnostic.py": (KILLS, *_RECOVERY, "tests/providers/test_secrets.py"),
    "innerloop/fsm/_guards.py": (
        KILLS,
        "tests/fsm/test_transitions.py",
        "tests/fsm/test_guard_reads.py",
        "tests/fsm/test_scenarios.py",
        "tests/fsm/test_abort.py",
        *_RECOVERY,
    ),
    "innerloop/fsm/_default.py": (
        KILLS,
        "tests/fsm/test_transitions.py",
        "tests/fsm/test_spec.py",
        "tests/fsm/test_scenarios.py",
    ),
    "innerloop/fsm/_phases.py": (
        KILLS,
        "tests/fsm/test_transitions.py",
        "tests/fsm/test_scenarios.py",
        "tests/fsm/test_abort.py",
        "tests/fsm/test_interrupts.py",
        "tests/fsm/test_output.py",
        *_RECOVERY,
        "tests/recovery/test_gate.py",
    ),
    "innerloop/providers/_errors.py": (KILLS, "tests/providers/test_errors.py"),
    "innerloop/tools/_runner.py": (
        KILLS,
        "tests/tools/test_runner_off_loop.py",
        "tests/tools/test_tool_runner.py",
        "tests/tools/test_tool_dispatch.py",
    ),
    "innerloop/checkpoint/_writer.py": (KILLS, "tests/checkpoint/test_checkpoints.py"),
}

# The modules added since (children, sessions, replay, evals), mutated with the wider
# operators too; the modules above keep the mutants (and so the samples and the scores)
# they were measured with.
WIDER: dict[str, tuple[str, ...]] = {
    "innerloop/fsm/_child.py": (
        KILLS,
        "tests/test_mutation_kills_children.py",
        "tests/fsm/test_child.py",
        "tests/fsm/test_child_turns.py",
        "tests/fsm/test_child_interrupts.py",
        "tests/fsm/test_child_checkpoints.py::test_a_child_state_left_early_goes_on_where_its_child_stopped",
    ),
    "innerloop/_session.py": (
        KILLS,
        "tests/test_mutation_kills_sessions.py",
        "tests/checkpoint/test_session.py",
    ),
    "innerloop/testing/_replay.py": (
        KILLS,
        "tests/test_mutation_kills_replay.py",
        "tests/testing/test_replay.py",
    ),
    "innerloop/evals/_checks.py": (KILLS, *_EVALS),
    "innerloop/evals/_dataset.py": (KILLS, *_EVALS),
    "innerloop/evals/_runner.py": (KILLS, *_EVALS, "tests/evals/test_rerun.py"),
    "innerloop/evals/_summary.py": (KILLS, "tests/test_mutation_kills_eval_summary.py", *_EVALS),
    "innerloop/evals/_report.py": (KILLS, "tests/test_mutation_kills_eval_report.py", *_EVALS),
    "innerloop/evals/_rerun.py": (
        KILLS,
        "tests/test_mutation_kills_eval_rerun.py",
        *_EVALS,
        "tests/evals/test_rerun.py",
    ),
}
MODULES.update(WIDER)

EQUIVALENT: dict[tuple[str, str], str] = {
    ("innerloop/fsm/_child.py", "left < own  ->  left <= own"): (
        "at left == own the child's turn count is lowered by own - left, which is 0"
    ),
    (
        "innerloop/fsm/_child.py",
        "run.state.final_state == 'suspended' and run.state.interr...  ->  "
        "run.state.final_state == 'suspended' or run.state.interru...",
    ): (
        "a child run ends suspended exactly when it holds an unanswered interrupt (the "
        "state that takes an answer clears it before the run can end otherwise)"
    ),
    ("innerloop/_session.py", "left < own  ->  left <= own"): (
        "at left == own the message's max_turns is set to the value it has"
    ),
    ("innerloop/_session.py", "tokens removed from (tokens, dollars)"): (
        "the params then always get SpendBudget(tokens, dollars), the limits they had"
    ),
    (
        "innerloop/evals/_dataset.py",
        "str removed from (str, Callable[[CheckContext], bool | str])",
    ): ("Predicates is a type alias, read by type checkers only"),
    ("innerloop/evals/_dataset.py", "swapped *_BUILDERS <-> 'Predicate'"): (
        "the list is sorted right after: the order of its members means nothing"
    ),
    ("innerloop/evals/_rerun.py", "swapped self.original.path <-> self.rerun.path"): (
        "where two paths part does not depend on which is read first"
    ),
    ("innerloop/testing/_replay.py", "return False  ->  return None"): (
        "_answered_whole's one caller reads it as a condition, where None is False"
    ),
    (
        "innerloop/testing/_replay.py",
        "return attrs.evolve(ended, history=history_fingerprint(st...  ->  return None",
    ): (
        "the replay reads its run's events, so the finished event it compares always "
        "holds the history's fingerprint: that branch never runs"
    ),
    ("innerloop/testing/_replay.py", "not self.path  ->  self.path"): (
        "the top player steps each transition before the run goes on, so its current "
        "state is the run's"
    ),
}
"""Mutants no behaviour can tell from the module (by module and description), each with
why: drawn (so a seed names the same sample) but not run."""

_SITECUSTOMIZE = """
import importlib.abc, importlib.util, os, sys

_NAME = os.environ.get("INNERLOOP_MUTANT_MODULE")
_SOURCE = os.environ.get("INNERLOOP_MUTANT_SOURCE")
_ORIGIN = os.environ.get("INNERLOOP_MUTANT_ORIGIN")


class _Mutant(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname != _NAME:
            return None
        return importlib.util.spec_from_loader(fullname, self, origin=_ORIGIN)

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        module.__file__ = _ORIGIN
        with open(_SOURCE, encoding="utf-8") as f:
            exec(compile(f.read(), _ORIGIN, "exec"), module.__dict__)


if _NAME and _SOURCE:
    sys.meta_path.insert(0, _Mutant())
"""

UNORDERED = frozenset({"DEFAULT_GUARDS", "EXCEPTION_TABLE", "_OVERFLOW_MARKERS", "_ATOMS"})
"""Tables whose order means nothing (looked up by key, or searched for any match): no
swapped neighbours in them, only removed members."""

_COMPARE_SWAP: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
}


_ARITHMETIC_SWAP: dict[type[ast.operator], type[ast.operator]] = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
}


def _stored(target: ast.expr) -> bool:
    """An assignment to an attribute or an item (state written where others read it), not
    to a local name (deleting that only raises NameError)."""
    return isinstance(target, ast.Attribute | ast.Subscript)


@attrs.frozen
class Mutant:
    module: str
    index: int
    line: int
    description: str


@attrs.frozen
class Outcome:
    mutant: Mutant
    killed: bool
    seconds: float
    how: str


def _text(node: ast.AST) -> str:
    text = ast.unparse(node).replace("\n", " ")
    return text if len(text) <= 60 else text[:57] + "..."


def _rebuilt(node: ast.List | ast.Tuple | ast.Set, elts: list[ast.expr]) -> ast.expr:
    if isinstance(node, ast.Set):
        return ast.Set(elts=elts)
    return type(node)(elts=elts, ctx=ast.Load())


class _Mutator(ast.NodeTransformer):
    """Walks a module in a fixed order; the ``target``-th candidate point is changed (or,
    with ``target`` None, every candidate is only recorded)."""

    def __init__(self, target: int | None, wider: bool = False) -> None:
        self.target = target
        self.wider = wider
        self.found: list[tuple[int, str]] = []
        self._no_swap = 0

    def _point(self, node: ast.AST, description: str, after: ast.AST) -> ast.AST:
        index = len(self.found)
        self.found.append((getattr(node, "lineno", 0), description))
        return after if index == self.target else node

    # What is never mutated: docstrings, annotations, f-strings, __all__.
    def visit_Expr(self, node: ast.Expr) -> ast.AST:
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return node
        self.generic_visit(node)
        call = node.value.value if isinstance(node.value, ast.Await) else node.value
        if not self.wider or not isinstance(call, ast.Call):
            return node
        return self._point(node, f"{_text(node)}  deleted", ast.Pass())

    def visit_JoinedStr(self, node: ast.JoinedStr) -> ast.AST:
        return node

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        name = node.value
        if (isinstance(name, ast.Name) and name.id == "Literal") or (
            isinstance(name, ast.Attribute) and name.attr == "Literal"
        ):
            return node  # a type, read by type checkers only
        return self.generic_visit(node)

    def visit_arg(self, node: ast.arg) -> ast.AST:
        return node

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AST:
        if node.value is not None:
            node.value = self._assigned([node.target], node.value)
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        for field in ("args", "body", "decorator_list"):
            value = getattr(node, field)
            if isinstance(value, list):
                setattr(node, field, [self.visit(v) for v in value])
            else:
                self.visit(value)
        return node

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_arguments(self, node: ast.arguments) -> ast.AST:
        node.defaults = [self.visit(d) for d in node.defaults]
        node.kw_defaults = [None if d is None else self.visit(d) for d in node.kw_defaults]
        return node

    def visit_Assign(self, node: ast.Assign) -> ast.AST:
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return node
        node.targets = [self.visit(t) for t in node.targets]
        node.value = self._assigned(node.targets, node.value)
        if not self.wider or not all(_stored(t) for t in node.targets):
            return node
        return self._point(node, f"{_text(node)}  deleted", ast.Pass())

    def _arithmetic(self, node: ast.AugAssign | ast.BinOp) -> ast.AST:
        """``a + b`` and ``a += b`` alike: the operator swapped, the operands kept."""
        self.generic_visit(node)
        swap = _ARITHMETIC_SWAP.get(type(node.op))
        if not self.wider or swap is None:
            return node
        after = copy.copy(node)
        after.op = swap()
        return self._point(node, f"{_text(node)}  ->  {_text(after)}", after)

    visit_AugAssign = visit_BinOp = _arithmetic

    def visit_Return(self, node: ast.Return) -> ast.AST:
        self.generic_visit(node)
        value = node.value
        if (
            not self.wider
            or value is None
            or (isinstance(value, ast.Constant) and value.value is None)
        ):
            return node
        after = ast.Return(value=ast.Constant(value=None))
        return self._point(node, f"{_text(node)}  ->  return None", after)

    def _assigned(self, targets: list[ast.expr], value: ast.expr) -> ast.expr:
        unordered = any(isinstance(t, ast.Name) and t.id in UNORDERED for t in targets)
        self._no_swap += unordered
        after = self.visit(value)
        self._no_swap -= unordered
        return cast(ast.expr, after)

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> ast.AST:
        self._no_swap += 1  # the order of an except tuple does not matter
        if node.type is not None:
            node.type = self.visit(node.type)
        self._no_swap -= 1
        node.body = [self.visit(b) for b in node.body]
        return node

    # The mutations.
    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        node.left = cast(ast.expr, self.visit(node.left))
        for i, (op, right) in enumerate(zip(node.ops, node.comparators, strict=True)):
            membership = isinstance(op, ast.In | ast.NotIn)  # x in (a, b): order means nothing
            self._no_swap += membership
            node.comparators[i] = cast(ast.expr, self.visit(right))
            self._no_swap -= membership
        for i, op in enumerate(node.ops):
            swap = _COMPARE_SWAP.get(type(op))
            if swap is None:
                continue
            after = ast.Compare(
                left=node.left,
                ops=[*node.ops[:i], swap(), *node.ops[i + 1 :]],
                comparators=node.comparators,
            )
            result = self._point(node, f"{_text(node)}  ->  {_text(after)}", after)
            if result is not node:
                return result
        return node

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.AST:
        self.generic_visit(node)
        other: ast.boolop = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        after = ast.BoolOp(op=other, values=node.values)
        return self._point(node, f"{_text(node)}  ->  {_text(after)}", after)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        self.generic_visit(node)
        if not isinstance(node.op, ast.Not):
            return node
        return self._point(node, f"{_text(node)}  ->  {_text(node.operand)}", node.operand)

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        value = node.value
        if isinstance(value, bool):
            new: bool | int | float = not value
        elif isinstance(value, int):
            new = value + 1
        elif isinstance(value, float):
            new = round(value + 0.1, 10)
        else:
            return node
        after = ast.Constant(value=new)
        return self._point(node, f"{value!r}  ->  {new!r}", after)

    def visit_Call(self, node: ast.Call) -> ast.AST:
        check = isinstance(node.func, ast.Name) and node.func.id in ("isinstance", "issubclass")
        self._no_swap += check
        self.generic_visit(node)
        self._no_swap -= check
        if isinstance(node.func, ast.Name) and node.func.id in ("max", "min"):
            other = "min" if node.func.id == "max" else "max"
            after = ast.Call(
                func=ast.Name(id=other, ctx=ast.Load()), args=node.args, keywords=node.keywords
            )
            return self._point(node, f"{_text(node)}  ->  {_text(after)}", after)
        return node

    def _members(self, node: ast.List | ast.Tuple | ast.Set, ordered: bool) -> ast.AST:
        self.generic_visit(node)
        if not isinstance(getattr(node, "ctx", ast.Load()), ast.Load) or len(node.elts) < 2:
            return node
        for i, elt in enumerate(node.elts):
            if isinstance(elt, ast.Starred):
                continue
            kept = [e for j, e in enumerate(node.elts) if j != i]
            after = _rebuilt(node, kept)
            result = self._point(elt, f"{_text(elt)} removed from {_text(node)}", after)
            if result is not elt:
                return result
        if not ordered or self._no_swap:
            return node
        for i in range(len(node.elts) - 1):
            if ast.dump(node.elts[i]) == ast.dump(node.elts[i + 1]):
                continue  # swapping equals changes nothing
            swapped = list(node.elts)
            swapped[i], swapped[i + 1] = swapped[i + 1], swapped[i]
            after = _rebuilt(node, swapped)
            described = f"{_text(node.elts[i])} <-> {_text(node.elts[i + 1])}"
            result = self._point(node.elts[i], f"swapped {described}", after)
            if result is not node.elts[i]:
                return result
        return node

    def visit_List(self, node: ast.List) -> ast.AST:
        return self._members(node, ordered=True)

    def visit_Tuple(self, node: ast.Tuple) -> ast.AST:
        return self._members(node, ordered=True)

    def visit_Set(self, node: ast.Set) -> ast.AST:
        return self._members(node, ordered=False)


def mutants(module: str) -> list[Mutant]:
    tree = ast.parse((ROOT / module).read_text())
    walker = _Mutator(None, wider=module in WIDER)
    walker.visit(tree)
    return [Mutant(module, i, line, text) for i, (line, text) in enumerate(walker.found)]


def mutated_source(mutant: Mutant) -> str:
    tree = ast.parse((ROOT / mutant.module).read_text())
    walker = _Mutator(mutant.index, wider=mutant.module in WIDER)
    tree = ast.fix_missing_locations(walker.visit(tree))
    return ast.unparse(tree)


def _env(site: Path, mutant: Mutant | None, source: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(ROOT)])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if mutant is not None and source is not None:
        env["INNERLOOP_MUTANT_MODULE"] = mutant.module.removesuffix(".py").replace("/", ".")
        env["INNERLOOP_MUTANT_SOURCE"] = str(source)
        env["INNERLOOP_MUTANT_ORIGIN"] = str(ROOT / mutant.module)
    return env


def _child(tests: tuple[str, ...], env: dict[str, str]) -> NoReturn:
    """In a forked child: forget innerloop (the heavy libraries stay imported), serve the
    mutant in its place, run pytest, exit with its code."""
    os.setsid()
    os.environ.clear()
    os.environ.update(env)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    for name in [n for n in sys.modules if n.split(".")[0] in ("innerloop", "tests")]:
        del sys.modules[name]
    exec(_SITECUSTOMIZE, {"__name__": "_mutant_hook"})
    os.chdir(ROOT)
    code = pytest.main(["-x", "-q", "-p", "no:cacheprovider", *tests])
    os._exit(int(code))


def _run_all(
    jobs: list[tuple[Mutant | None, str]], work: Path, timeout: float, parallel: int
) -> list[tuple[int | None, float]]:
    """Run each (mutant or None for the module unmutated, source) in a forked child, up
    to ``parallel`` at once: its pytest exit code (None when it timed out) and seconds."""
    results: list[tuple[int | None, float]] = [(None, 0.0)] * len(jobs)
    running: dict[int, tuple[int, float, Path | None]] = {}
    timed_out: set[int] = set()
    queue = list(enumerate(jobs))
    while queue or running:
        while queue and len(running) < parallel:
            i, (mutant, module) = queue.pop(0)
            source = None
            if mutant is not None:
                source = work / f"mutant{i}.py"
                source.write_text(mutated_source(mutant))
            sys.stdout.flush()
            pid = os.fork()
            if pid == 0:
                _child(MODULES[module], _env(work, mutant, source))
            running[pid] = (i, time.monotonic(), source)
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            now = time.monotonic()
            for child, (_, began, _) in running.items():
                if now - began > timeout and child not in timed_out:
                    timed_out.add(child)
                    os.killpg(child, signal.SIGKILL)
            time.sleep(0.02)
            continue
        i, began, source = running.pop(pid)
        if source is not None:
            source.unlink()
        code = None if pid in timed_out else os.waitstatus_to_exitcode(status)
        results[i] = (code, time.monotonic() - began)
    return results


def _outcome(mutant: Mutant, code: int | None, seconds: float) -> Outcome:
    if code is None:
        return Outcome(mutant, True, seconds, "timeout")
    if code == 0:
        return Outcome(mutant, False, seconds, "survived")
    if code in (1, 2, 3) or code < 0:  # failed, interrupted, internal error, a signal
        return Outcome(mutant, True, seconds, "killed")
    raise RuntimeError(f"pytest exited {code} on {mutant}: run its tests by hand")


def _select(args: argparse.Namespace) -> Iterator[tuple[str, list[Mutant], int]]:
    for module in MODULES:
        if args.module and not any(m in module for m in args.module):
            continue
        found = mutants(module)
        chosen = [
            m
            for m in found
            if (args.line is None or m.line == args.line)
            and (not args.index or m.index in args.index)
        ]
        if args.sample and len(chosen) > args.sample:
            chosen = random.Random(f"{args.seed}:{module}").sample(chosen, args.sample)
            chosen.sort(key=lambda m: m.index)
        chosen = [m for m in chosen if (module, m.description) not in EQUIVALENT]
        yield module, chosen, len(found)


def _table(rows: list[tuple[str, int, int, int]]) -> str:
    head = f"| {'module':36} | {'mutants':>7} | {'killed':>6} | {'survived':>8} | {'score':>6} |"
    lines = [head, "|" + "|".join("-" * (len(c) + 0) for c in head.split("|")[1:-1]) + "|"]
    for module, total, killed, survived in rows:
        score = f"{100 * killed / (killed + survived):.1f}%" if killed + survived else "-"
        lines.append(f"| {module:36} | {total:>7} | {killed:>6} | {survived:>8} | {score:>6} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sample", type=int, default=30, help="mutants per module (0: all)")
    parser.add_argument("--seed", default="22")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--module", action="append", help="only modules whose path holds this")
    parser.add_argument("--line", type=int, help="only mutants on this line")
    parser.add_argument("--index", type=int, action="append", help="only the mutant #N")
    parser.add_argument("--list", action="store_true", help="list the mutants, run nothing")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    importlib.import_module("innerloop.testing")  # once: each forked child imports only ours
    started = time.monotonic()
    rows: list[tuple[str, int, int, int]] = []
    with tempfile.TemporaryDirectory(prefix="innerloop-mutation-") as tmp:
        work = Path(tmp)
        (work / "sitecustomize.py").write_text(_SITECUSTOMIZE)
        for module, chosen, total in _select(args):
            if args.list:
                for m in chosen:
                    print(f"{module}:{m.line}  #{m.index}  {m.description}")
                continue
            [(code, baseline)] = _run_all([(None, module)], work, 900, 1)
            if code != 0:
                print(f"{module}: its tests fail unmutated (pytest exit {code}); fix them first")
                return 1
            timeout = 6 * baseline + 30  # generous: the mutants run side by side
            runs = _run_all([(m, module) for m in chosen], work, timeout, args.jobs)
            outcomes = [
                _outcome(m, code, secs) for m, (code, secs) in zip(chosen, runs, strict=True)
            ]
            killed = sum(o.killed for o in outcomes)
            for o in outcomes:
                if not o.killed:
                    where = f"{module}:{o.mutant.line}  #{o.mutant.index}"
                    print(f"SURVIVED {where}  {o.mutant.description}")
            rows.append((module, len(chosen), killed, len(chosen) - killed))
            print(
                f"{module}: {killed}/{len(chosen)} killed of {total} mutants "
                f"(tests {baseline:.1f} s unmutated)",
                flush=True,
            )
    if args.list:
        return 0
    total_row = ("total", sum(r[1] for r in rows), sum(r[2] for r in rows), sum(r[3] for r in rows))
    print(_table([*rows, total_row]))
    print(
        f"seed {args.seed}, sample {args.sample or 'all'} per module, {args.jobs} jobs, "
        f"{time.monotonic() - started:.0f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
