"""Checkpointing cost: innerloop's stores against LangGraph's own checkpointers.

The same run: ``--turns`` model turns, each with one tool call (a zero-latency fake
model, a tool that returns at once), checkpointed at every transition.

* innerloop: ``Harness(checkpointer=...)`` on SQLite (a file, WAL) and PostgreSQL. A turn
  is six transitions (assemble, normalize, call, stream, execute, check): six checkpoints.
* LangGraph: the equivalent graph (a model node appending the assistant message with its
  tool call, a tool node appending the result, a conditional edge back) with
  ``SqliteSaver`` and ``PostgresSaver`` (``langgraph-checkpoint-sqlite`` /
  ``-postgres``, in the ``bench`` extra). LangGraph writes a checkpoint per super-step:
  two per turn. Both keep the same messages (same text, same tool calls and results).

Checkpoint time per turn = the time spent in checkpointing calls / turns, best of
``--repeat`` (innerloop: the run's step hook, which encodes and writes; LangGraph: every
call on its saver: ``put``, ``put_writes``, ``get_tuple``, serialization included). Also
printed: the whole run's time with and without the store (LangGraph's saver calls may
overlap in its worker threads, so their sum can exceed the run's time; the difference of
run times is the other measure). Bytes stored = the payload columns of every table
(innerloop: message and checkpoint JSON; LangGraph: checkpoint, metadata, channel blobs
and writes), after
``--turns`` and after ``--long`` turns. Prints both, and innerloop/LangGraph ratios (the
targets: time <= 0.25, bytes <= 0.25, bytes growing linearly).

PostgreSQL: ``--pg postgresql://user@host/db`` (each run gets fresh tables by schema),
or, on Debian with the ``postgresql`` package, a throwaway cluster is started.

Usage: ``python bench/checkpoint.py [--turns 50] [--long 500] [--repeat 3] [--pg URL]``.
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
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any, TypedDict

from innerloop import Harness, HarnessParams, ToolSpec
from innerloop.checkpoint import open_checkpointer
from innerloop.testing import FakeProvider, Reply, reply, tool_call
from innerloop.tools import ToolContext, ToolOutput

ROOT = Path(__file__).resolve().parents[1]


async def _echo(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
    return ToolOutput("ok")


TOOL = ToolSpec("echo", "Echo.", {"type": "object"}, _echo)


def _turn_text(i: int) -> str:
    return f"turn {i}: calling echo"


# -- innerloop ------------------------------------------------------------------------------


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


def innerloop_run(turns: int, store_url: str | None) -> tuple[float, float, int]:
    """Seconds for the run, seconds checkpointing, and the bytes stored afterwards."""
    script: list[Reply] = [
        reply(_turn_text(i), tool_call("echo", {"x": i}, id=f"c{i}")) for i in range(turns)
    ]
    script.append(reply("done"))
    steps = iter(script)
    provider = FakeProvider(lambda request: next(steps))
    params = HarnessParams(model="scripted:m", tools=[TOOL], max_turns=turns + 1)
    store = open_checkpointer(store_url) if store_url else None
    harness = Harness(params, [provider], checkpointer=store)
    timer = Timed()
    started = time.perf_counter()
    run = harness.start("go")
    if run.on_step is not None:
        run.on_step = timer.wrap(run.on_step)
    state = asyncio.run(run.run())
    took = time.perf_counter() - started
    assert state.exit_reason == "model_complete", state.exit_reason
    size = store.stored_bytes() if store is not None else 0
    if store is not None:
        store.close()
    return took, timer.seconds, size


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


def langgraph_run(turns: int, saver: Any) -> tuple[float, float]:
    """Seconds for the run, and seconds in the saver's calls."""
    timer = Timed()
    if saver is not None:
        for name in ("put", "put_writes", "get_tuple"):
            setattr(saver, name, timer.wrap(getattr(saver, name)))
    graph = langgraph_graph(turns, saver)
    config = {"configurable": {"thread_id": uuid.uuid4().hex}, "recursion_limit": 4 * turns + 10}
    start = {"messages": [{"role": "user", "content": "go"}], "turns": 0}
    started = time.perf_counter()
    out = graph.invoke(start, config)
    took = time.perf_counter() - started
    assert len(out["messages"]) == 2 * turns + 2
    return took, timer.seconds


@contextlib.contextmanager
def langgraph_sqlite(path: Path, wal: bool) -> Iterator[tuple[Any, Callable[[], int]]]:
    """LangGraph's SqliteSaver on a plain connection (SQLite's defaults: a rollback journal,
    a sync per commit), or, with ``wal``, on the settings innerloop's store uses."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(path, check_same_thread=False)
    if wal:
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


Row = tuple[float, float, int]
"""Checkpoint seconds per turn, whole-run seconds per turn, bytes stored."""


def measure(turns: int, repeat: int, work: Path, pg: str) -> dict[str, Row]:
    out: dict[str, Row] = {}
    bare_il = min(innerloop_run(turns, None)[0] for _ in range(repeat))
    bare_lg = min(langgraph_run(turns, None)[0] for _ in range(repeat))
    out["innerloop (no store)"] = (0.0, bare_il / turns, 0)
    out["langgraph (no store)"] = (0.0, bare_lg / turns, 0)

    def il(make_url: Callable[[], str]) -> Row:
        runs = [innerloop_run(turns, make_url()) for _ in range(repeat)]
        return (
            min(c for _, c, _ in runs) / turns,
            min(t for t, _, _ in runs) / turns,
            runs[0][2],
        )

    def lg(opener: Callable[[], Any]) -> Row:
        runs, size = [], 0
        for _ in range(repeat):
            with opener() as (saver, measure_size):
                runs.append(langgraph_run(turns, saver))
                size = measure_size()
        return min(c for _, c in runs) / turns, min(t for t, _ in runs) / turns, size

    out["innerloop sqlite"] = il(lambda: f"sqlite:///{work / uuid.uuid4().hex}.db")
    out["langgraph sqlite"] = lg(
        lambda: langgraph_sqlite(work / f"{uuid.uuid4().hex}.lg.db", wal=False)
    )
    out["langgraph sqlite WAL"] = lg(
        lambda: langgraph_sqlite(work / f"{uuid.uuid4().hex}.lg.db", wal=True)
    )
    out["innerloop postgres"] = il(lambda: fresh_database(pg))
    out["langgraph postgres"] = lg(lambda: langgraph_postgres(fresh_database(pg)))
    return out


def report(turns: int, long: int, repeat: int, pg_url: str | None) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-ckpt-") as tmp, postgres_server(pg_url) as pg:
        work = Path(tmp)
        short = measure(turns, repeat, work, pg)
        longer = measure(long, 1, work, pg) if long else {}
    print(f"{turns}-turn run, one tool call per turn, checkpoint at every transition")
    head = f"{'':22} {'ckpt ms/turn':>12} {'run ms/turn':>12} {'bytes@' + str(turns):>12}"
    print(head + (f" {'bytes@' + str(long):>14}" if long else ""))
    for name, (ckpt, whole, size) in short.items():
        line = f"{name:22} {ckpt * 1000:12.3f} {whole * 1000:12.3f} {size:12,d}"
        if long:
            line += f" {longer[name][2]:14,d}"
        print(line)
    print("ratios innerloop / langgraph (targets: <= 0.25)")
    bare_il, bare_lg = short["innerloop (no store)"][1], short["langgraph (no store)"][1]
    for store, theirs in (("sqlite", "sqlite"), ("sqlite", "sqlite WAL"), ("postgres", "postgres")):
        il, lg = short[f"innerloop {store}"], short[f"langgraph {theirs}"]
        diff = (il[1] - bare_il) / (lg[1] - bare_lg)
        line = (
            f"  {theirs:11} checkpoint time {il[0] / lg[0]:.3f} (run-time difference "
            f"{diff:.3f})  bytes@{turns} {il[2] / lg[2]:.3f}"
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
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--pg", help="a PostgreSQL server URL (default: start one)")
    args = parser.parse_args()
    report(args.turns, args.long, args.repeat, args.pg)


if __name__ == "__main__":
    main()
