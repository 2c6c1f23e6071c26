"""What running a machine as a child costs: a child run against a top-level run.

The same machine (the default one) runs the same work as ``bench/overhead.py``'s main
contender: ``--turns`` iterations, each a model turn with one tool call, on a zero-latency
``FakeProvider``. Two contenders:

* ``top-level``: a ``Harness`` runs it, as a host does;
* ``child``: a parent ``Harness`` whose machine is ``idle -> work -> model_complete``, the
  ``work`` state running the same machine as a child (``child_handler``): a task of its
  own, every event wrapped in a ``ChildEvent`` with its path and passed up through the
  parent's ``events()``, usage and cost rolled up into the parent's at each answer.

``--instructions`` counts the instructions per iteration of each under valgrind's
callgrind (``bench/overhead.py``'s method: two batches, the difference over the iterations
between them, so start-up cancels out) and prints the ratio, child over top-level, with
"met" or "MISSED" against the target of at most 1.2x, twice: for a quiet ``run()``
(nobody reads the events, so a child makes none) and with the host reading every event
of ``events()`` (the ``-read`` contenders: each child event wrapped and passed up).
Without it, wall time per iteration (noisy on a shared machine).

Usage: ``python bench/nested.py [--instructions] [--turns 10] [--runs 10]``.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import time
from collections.abc import Awaitable, Callable

from overhead import COUNTER, MACHINE, count_all, make_provider, params, target

from innerloop import Child, Harness, HarnessState
from innerloop.fsm import (
    CHILD_GUARDS,
    DEFAULT_SPEC,
    CompiledMachine,
    MachineSpec,
    StateSpec,
    TransitionSpec,
    child_handler,
    child_transitions,
    compile_spec,
)

RunFn = Callable[[int], Awaitable[int]]
TARGET = 1.2
"""A child run may cost at most this many times a top-level run (instructions)."""


def parent_spec(child: Child) -> MachineSpec:
    """``idle -> work -> model_complete``: the smallest machine that runs a child."""
    finals = ("model_complete", "failed", "aborted")
    return MachineSpec(
        "nested_bench",
        "idle",
        (
            StateSpec("idle"),
            StateSpec("work", doc="runs the child"),
            StateSpec("abort", "recovery", runs_when_aborting=True),
            *(StateSpec(f, "final", f) for f in finals),
        ),
        (
            TransitionSpec("idle", "work"),
            *child_transitions("work", "model_complete", "failed", finals=finals),
            TransitionSpec("abort", "aborted", "abort_requested", "exit"),
            TransitionSpec("abort", "failed", None, "exit"),
        ),
        {
            "idle": DEFAULT_SPEC.handlers["idle"],
            "work": child_handler(child),
            "abort": DEFAULT_SPEC.handlers["abort"],
        },
        {"abort_requested": DEFAULT_SPEC.guards["abort_requested"], **CHILD_GUARDS},
    )


async def _run(harness: Harness, read: bool) -> HarnessState:
    """The run to its end: quietly (``run()``), or reading every event (``events()``)."""
    if not read:
        return await harness.run("go")
    run = harness.start("go")
    async for _ in run.events():
        pass
    return run.state


async def top_level(turns: int, read: bool = False) -> int:
    harness = Harness(params(turns), [make_provider(turns)], machine=MACHINE, token_counter=COUNTER)
    state = await _run(harness, read)
    assert state.exit_reason == "model_complete", state.exit_reason
    return state.turns


@functools.cache
def parent_machine(turns: int) -> CompiledMachine:
    """The parent's machine, compiled once (as a host does); its child calls the
    parent's provider."""
    return compile_spec(parent_spec(Child("work", params(turns), MACHINE)))


async def as_child(turns: int, read: bool = False) -> int:
    harness = Harness(
        params(turns), [make_provider(turns)], machine=parent_machine(turns), token_counter=COUNTER
    )
    state = await _run(harness, read)
    assert state.exit_reason == "model_complete", state.exit_reason
    ran = state.notes["children"]["work"]
    assert ran["exit_reason"] == "model_complete", ran
    return int(ran["turns"])


CONTENDERS: dict[str, RunFn] = {
    "top-level": top_level,
    "child": as_child,
    "top-level-read": functools.partial(top_level, read=True),
    "child-read": functools.partial(as_child, read=True),
}
"""``-read``: the host reads ``events()`` (every child event wrapped and passed up);
without: ``run()``, where nobody reads them and a child makes none."""
PAIRS = (("quiet run()", "child", "top-level"), ("events() read", "child-read", "top-level-read"))


async def _batch(fn: RunFn, turns: int, runs: int) -> int:
    return sum([await fn(turns) for _ in range(runs)])


def main() -> None:
    ap = argparse.ArgumentParser(description="a child run against a top-level run")
    ap.add_argument("--turns", type=int, default=10, help="iterations per run")
    ap.add_argument("--runs", type=int, default=10, help="runs per batch")
    ap.add_argument("--instructions", action="store_true", help="count under callgrind")
    ap.add_argument("--only", choices=sorted(CONTENDERS), help="run this contender alone")
    args = ap.parse_args()
    if args.only:
        fn = CONTENDERS[args.only]
        asyncio.run(_batch(fn, args.turns, 1))
        print(f"iterations {asyncio.run(_batch(fn, args.turns, args.runs))}")
        return
    if args.instructions:
        counts = count_all(list(CONTENDERS), args.turns, args.runs, script=__file__)
        print(f"instructions per iteration (callgrind; {args.turns} iterations per run)")
        for name, count in counts.items():
            print(f"{name:16s} {count:12,.0f}")
        for number, (how, child, top) in enumerate(PAIRS, 1):
            ratio = counts[child] / counts[top]
            target(number, f"child run / top-level run, {how}, instructions", ratio, TARGET, "x")
        return
    best = dict.fromkeys(CONTENDERS, float("inf"))
    for _ in range(5):
        for name, fn in CONTENDERS.items():
            start = time.perf_counter()
            n = asyncio.run(_batch(fn, args.turns, args.runs))
            best[name] = min(best[name], (time.perf_counter() - start) / n * 1e6)
    for name, us in best.items():
        print(f"{name:16s} {us:10.1f} µs/iter")
    for how, child, top in PAIRS:
        ratio = best[child] / best[top]
        verdict = "met" if ratio <= TARGET else "MISSED"
        print(f"child / top-level, {how}, wall time: {ratio:.2f}x (target <= {TARGET}x): {verdict}")


if __name__ == "__main__":
    main()
