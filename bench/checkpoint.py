"""Checkpointing cost: innerloop's stores against LangGraph's own checkpointers.

The same run: ``--turns`` model turns, each with one tool call (a zero-latency fake
model, a tool that returns at once), checkpointed at every transition.

* innerloop: ``Harness(checkpointer=...)`` on SQLite (a file, WAL, ``synchronous=NORMAL``
  by default; the row marked ``FULL`` syncs every commit, as LangGraph's saver does as
  shipped) and PostgreSQL. A turn
  is six transitions (assemble, normalize, call, stream, execute, check): six checkpoints,
  committed in two groups by default (before the model call and before the tool runs:
  ``checkpoint_commit="barrier"``), or each on its own (the rows marked ``each``).
* LangGraph: the equivalent graph (a model node appending the assistant message with its
  tool call, a tool node appending the result, a conditional edge back) with
  ``SqliteSaver`` and ``PostgresSaver`` (``langgraph-checkpoint-sqlite`` /
  ``-postgres``, in the ``bench`` extra). LangGraph writes a checkpoint per super-step:
  two per turn. Both keep the same messages (same text, same tool calls and results).
  LangGraph's default durability (``"async"``) writes a step's checkpoint while the next
  step runs, the tool node included; the rows marked ``sync`` (``durability="sync"``)
  write it before the next step starts, the guarantee closest to innerloop's barrier.
  The targets are against the default.

Checkpoint time per turn = the time spent in checkpointing calls / turns, best of
``--repeat`` (innerloop: the run's step hook, which encodes every checkpoint and waits
for each group's commit; LangGraph: every call on its saver: ``put``, ``put_writes``,
``get_tuple``, serialization included). The contenders take turns (one run of each, then
again), so a change of load on a shared machine falls on all of them alike. Also
printed: the whole run's time with and without the store (LangGraph's saver calls may
overlap in its worker threads, so their sum can exceed the run's time; the difference of
run times is the other measure), and the run's CPU time (``process_time``: every thread
of this process) with and without the store: on a loaded machine the least noisy of the
three, but blind to what a PostgreSQL server does and to waiting for it. Bytes stored =
the payload columns of every table (innerloop: message and checkpoint JSON; LangGraph:
checkpoint, metadata, channel blobs and writes), after ``--turns`` and after ``--long``
turns. Prints both, and innerloop/LangGraph ratios (the
targets: time <= 0.25, bytes <= 0.25, bytes growing linearly).

PostgreSQL: ``--pg postgresql://user@host/db`` (each run gets fresh tables by schema),
or, on Debian with the ``postgresql`` package, a throwaway cluster is started.

Usage: ``python bench/checkpoint.py [--turns 50] [--long 500] [--repeat 5] [--pg URL]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import operator
import shutil
import sqlite3
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any, TypedDict

from innerloop import Harness, HarnessParams, HarnessState, ToolSpec
from innerloop.checkpoint import (
    CheckpointCommit,
    Checkpointer,
    PostgresCheckpointer,
    SQLiteCheckpointer,
    open_checkpointer,
)
from innerloop.testing import FakeProvider, Reply, reply, tool_call
from innerloop.tools import ToolContext, ToolOutput

ROOT = Path(__file__).resolve().parents[1]


async def _echo(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    return ToolOutput("ok")


TOOL = ToolSpec("echo", "Echo.", {"type": "object"}, _echo)


def _turn_text(i: int) -> str:
    return f"turn {i}: calling echo"


# -- innerloop ------------------------------------------------------------------------------


Sample = tuple[float, float, int, float]
"""One run: seconds, seconds checkpointing, bytes stored, CPU seconds."""


class Timed:
    """Wraps callables and adds up the seconds spent in them."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - started

        return timed

    def wrap_hook(self, hook: Callable[..., Any]) -> Callable[..., Any]:
        """A step hook timed with the commit it may leave for the driver to await."""
        timed_hook = self.wrap(hook)

        async def timed_wait(after: Awaitable[None]) -> None:
            started = time.perf_counter()
            try:
                await after
            finally:
                self.seconds += time.perf_counter() - started

        def timed(*args: Any) -> Any:
            after = timed_hook(*args)
            return None if after is None else timed_wait(after)

        return timed


def innerloop_run(
    turns: int, store_url: str | Checkpointer | None, commit: CheckpointCommit = "barrier"
) -> Sample:
    """Seconds for the run, seconds checkpointing (the step hook: encoding, and the
    commits it waits for at each barrier), the bytes stored afterwards, and the CPU
    seconds of the run (every thread of the process)."""
    script: list[Reply] = [
        reply(_turn_text(i), tool_call("echo", {"x": i}, id=f"c{i}")) for i in range(turns)
    ]
    script.append(reply("done"))
    steps = iter(script)
    provider = FakeProvider(lambda request: next(steps))
    params = HarnessParams(model="scripted:m", tools=[TOOL], max_turns=turns + 1)
    store = open_checkpointer(store_url) if isinstance(store_url, str) else store_url
    harness = Harness(params, [provider], checkpointer=store, checkpoint_commit=commit)
    timer = Timed()

    async def drive() -> tuple[HarnessState, float, float]:
        # the asynchronous connection of PostgreSQL's store opened before the run, as its
        # synchronous one is (and LangGraph's saver's): a host's loop opens it once
        if isinstance(store, PostgresCheckpointer):
            await store.aconnect()
        started, cpu = time.perf_counter(), time.process_time()
        run = harness.start("go")
        if run.on_step is not None:
            run.on_step = timer.wrap_hook(run.on_step)
        state = await run.run()
        return state, time.perf_counter() - started, time.process_time() - cpu

    state, took, cpu = asyncio.run(drive())
    assert state.exit_reason == "model_complete", state.exit_reason
    size = store.stored_bytes() if store is not None else 0
    if store is not None:
        store.close()
    return took, timer.seconds, size, cpu


# -- LangGraph ------------------------------------------------------------------------------


class GraphState(TypedDict):
    messages: Annotated[list[dict[str, Any]], operator.add]
    turns: int


def langgraph_graph(turns: int, checkpointer: Any) -> Any:
    from langgraph.graph import END, START, StateGraph

    def model(state: GraphState) -> dict[str, Any]:
        i = state["turns"]
        if i >= turns:
            return {"messages": [{"role": "assistant", "content": "done"}], "turns": i + 1}
        content = [
            {"type": "text", "text": _turn_text(i)},
            {"type": "tool_use", "id": f"c{i}", "name": "echo", "input": {"x": i}},
        ]
        return {"messages": [{"role": "assistant", "content": content}], "turns": i + 1}

    def tools(state: GraphState) -> dict[str, Any]:
        call = state["messages"][-1]["content"][1]
        result = {"type": "tool_result", "tool_use_id": call["id"], "content": "ok"}
        return {"messages": [{"role": "user", "content": [result]}]}

    def route(state: GraphState) -> str:
        return "tools" if state["turns"] <= turns else END

    g = StateGraph(GraphState)
    g.add_node("model", model)
    g.add_node("tools", tools)
    g.add_edge(START, "model")
    g.add_conditional_edges("model", route, ["tools", END])
    g.add_edge("tools", "model")
    return g.compile(checkpointer=checkpointer)


def langgraph_run(turns: int, saver: Any, durability: str = "async") -> tuple[float, float, float]:
    """Seconds for the run, seconds in the saver's calls, CPU seconds of the run."""
    timer = Timed()
    if saver is not None:
        for name in ("put", "put_writes", "get_tuple"):
            setattr(saver, name, timer.wrap(getattr(saver, name)))
    graph = langgraph_graph(turns, saver)
    config = {"configurable": {"thread_id": uuid.uuid4().hex}, "recursion_limit": 4 * turns + 10}
    start = {"messages": [{"role": "user", "content": "go"}], "turns": 0}
    started, cpu = time.perf_counter(), time.process_time()
    options: dict[str, Any] = {"durability": durability} if saver is not None else {}
    out = graph.invoke(start, config, **options)
    took, cpu = time.perf_counter() - started, time.process_time() - cpu
    assert len(out["messages"]) == 2 * turns + 2
    return took, timer.seconds, cpu


@contextlib.contextmanager
def langgraph_sqlite(path: Path, normal: bool) -> Iterator[tuple[Any, Callable[[], int]]]:
    """LangGraph's SqliteSaver as shipped (its ``setup`` switches the file to WAL; SQLite's
    default ``synchronous=FULL`` syncs every commit), or, with ``normal``, on the settings
    innerloop's store uses by default (WAL, ``synchronous=NORMAL``)."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(path, check_same_thread=False)
    if normal:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
    saver = SqliteSaver(conn)
    saver.setup()

    def size() -> int:
        total = 0
        for sql in (
            "SELECT COALESCE(SUM(LENGTH(checkpoint) + LENGTH(metadata)), 0) FROM checkpoints",
            "SELECT COALESCE(SUM(LENGTH(value)), 0) FROM writes",
        ):
            total += int(conn.execute(sql).fetchone()[0])
        return total

    try:
        yield saver, size
    finally:
        conn.close()


@contextlib.contextmanager
def langgraph_postgres(url: str) -> Iterator[tuple[Any, Callable[[], int]]]:
    from langgraph.checkpoint.postgres import PostgresSaver

    with PostgresSaver.from_conn_string(url) as saver:
        saver.setup()

        def size() -> int:
            total = 0
            with saver._cursor() as cur:
                for sql in (
                    "SELECT COALESCE(SUM(octet_length(checkpoint::text) "
                    "+ octet_length(metadata::text)), 0) AS n FROM checkpoints",
                    "SELECT COALESCE(SUM(octet_length(blob)), 0) AS n FROM checkpoint_blobs",
                    "SELECT COALESCE(SUM(octet_length(blob)), 0) AS n FROM checkpoint_writes",
                ):
                    cur.execute(sql)
                    total += int(cur.fetchone()["n"])
            return total

        yield saver, size


# -- PostgreSQL -----------------------------------------------------------------------------


@contextlib.contextmanager
def postgres_server(url: str | None) -> Iterator[str]:
    if url is not None:
        yield url
        return
    sys.path.insert(0, str(ROOT))
    from tests.durable._procs import PostgresServer, Processes

    logs = Path(tempfile.mkdtemp(prefix="bench-pg-logs-"))
    root = Path(tempfile.mkdtemp(prefix="bench-pg-"))
    owner = Processes(logs)
    server = PostgresServer(owner, root)
    try:
        server.start()
        yield server.url
    finally:
        owner.close()
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(logs, ignore_errors=True)


def fresh_database(server_url: str) -> str:
    import psycopg

    name = "bench_" + uuid.uuid4().hex[:10]
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return server_url.rsplit("/", 1)[0] + "/" + name


# -- the comparison -------------------------------------------------------------------------


Row = tuple[float, float, int, float]
"""Checkpoint seconds per turn, whole-run seconds per turn, bytes stored, CPU seconds
per turn."""


def measure(turns: int, repeat: int, work: Path, pg: str) -> dict[str, Row]:
    """Each contender ``repeat`` times, in turns (one run of each, then again), so a
    change of load on a shared machine falls on all of them alike; the best of each."""

    def sqlite_url() -> str:
        return f"sqlite:///{work / uuid.uuid4().hex}.db"

    def lg(opener: Callable[[], Any], durability: str = "async") -> Sample:
        with opener() as (saver, measure_size):
            took, ckpt, cpu = langgraph_run(turns, saver, durability)
            return took, ckpt, measure_size(), cpu

    def lg_bare() -> Sample:
        took, ckpt, cpu = langgraph_run(turns, None)
        return took, ckpt, 0, cpu

    def lg_sqlite(normal: bool) -> Any:
        return langgraph_sqlite(work / f"{uuid.uuid4().hex}.lg.db", normal=normal)

    def sqlite_full() -> Checkpointer:
        return SQLiteCheckpointer(work / f"{uuid.uuid4().hex}.db", synchronous="FULL")

    contenders: dict[str, Callable[[], Sample]] = {
        "innerloop (no store)": lambda: innerloop_run(turns, None),
        "langgraph (no store)": lg_bare,
        "innerloop sqlite": lambda: innerloop_run(turns, sqlite_url()),
        "innerloop sqlite each": lambda: innerloop_run(turns, sqlite_url(), "each"),
        "innerloop sqlite FULL": lambda: innerloop_run(turns, sqlite_full()),
        "langgraph sqlite": lambda: lg(lambda: lg_sqlite(normal=False)),
        "langgraph sqlite NORMAL": lambda: lg(lambda: lg_sqlite(normal=True)),
        "langgraph sqlite NORMAL sync": lambda: lg(lambda: lg_sqlite(normal=True), "sync"),
        "innerloop postgres": lambda: innerloop_run(turns, fresh_database(pg)),
        "innerloop postgres each": lambda: innerloop_run(turns, fresh_database(pg), "each"),
        "langgraph postgres": lambda: lg(lambda: langgraph_postgres(fresh_database(pg))),
        "langgraph postgres sync": lambda: lg(
            lambda: langgraph_postgres(fresh_database(pg)), "sync"
        ),
    }
    samples: dict[str, list[Sample]] = {name: [] for name in contenders}
    for _ in range(repeat):
        for name, run in contenders.items():
            samples[name].append(run())
    return {
        name: (
            min(r[1] for r in runs) / turns,
            min(r[0] for r in runs) / turns,
            runs[-1][2],
            min(r[3] for r in runs) / turns,
        )
        for name, runs in samples.items()
    }


def report(turns: int, long: int, repeat: int, pg_url: str | None) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-ckpt-") as tmp, postgres_server(pg_url) as pg:
        work = Path(tmp)
        short = measure(turns, repeat, work, pg)
        longer = measure(long, 1, work, pg) if long else {}
    print(f"{turns}-turn run, one tool call per turn, checkpoint at every transition")
    head = (
        f"{'':26} {'ckpt ms/turn':>12} {'run ms/turn':>12} {'cpu ms/turn':>12} "
        f"{'bytes@' + str(turns):>12}"
    )
    print(head + (f" {'bytes@' + str(long):>14}" if long else ""))
    for name, (ckpt, whole, size, cpu) in short.items():
        line = f"{name:26} {ckpt * 1000:12.3f} {whole * 1000:12.3f} {cpu * 1000:12.3f} {size:12,d}"
        if long:
            line += f" {longer[name][2]:14,d}"
        print(line)
    print("ratios innerloop / langgraph (targets: <= 0.25)")
    bare_il, bare_lg = short["innerloop (no store)"], short["langgraph (no store)"]
    pairs = (
        ("sqlite", "sqlite"),
        ("sqlite FULL", "sqlite"),
        ("sqlite", "sqlite NORMAL"),
        ("sqlite", "sqlite NORMAL sync"),
        ("sqlite each", "sqlite NORMAL"),
        ("postgres", "postgres"),
        ("postgres", "postgres sync"),
        ("postgres each", "postgres"),
    )
    for store, theirs in pairs:
        il, lg = short[f"innerloop {store}"], short[f"langgraph {theirs}"]
        diff = (il[1] - bare_il[1]) / (lg[1] - bare_lg[1])
        cpu = (il[3] - bare_il[3]) / (lg[3] - bare_lg[3])
        line = (
            f"  {store:13} / {theirs:15} checkpoint time {il[0] / lg[0]:.3f} (run-time "
            f"difference {diff:.3f}, CPU difference {cpu:.3f})  bytes@{turns} {il[2] / lg[2]:.3f}"
        )
        if longer:
            il_l, lg_l = longer[f"innerloop {store}"], longer[f"langgraph {theirs}"]
            line += f"  bytes@{long} {il_l[2] / lg_l[2]:.4f}"
            line += (
                f"  (x{long // turns} turns: innerloop bytes x{il_l[2] / il[2]:.1f}, "
                f"langgraph x{lg_l[2] / lg[2]:.1f})"
            )
        print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--long", type=int, default=500, help="second size point (0: skip)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--pg", help="a PostgreSQL server URL (default: start one)")
    args = parser.parse_args()
    report(args.turns, args.long, args.repeat, args.pg)


if __name__ == "__main__":
    main()
