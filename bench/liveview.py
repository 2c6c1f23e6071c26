"""The live view's cost on a large event log: memory, time to list, bytes per update.

Run: ``python bench/liveview.py`` (from the repository root; ``--events 1000000`` by
default, ``--per-run 100000`` events a run). Writes a log of that many events (runs of
model turns: transitions, stream deltas, a model response, a tool call), serves it with
``UIServer`` in this process and prints:

- the server's memory: resident set size before and after the first listing (the log is
  read then), and its growth;
- the time of the first ``GET /api/runs`` (reading the whole log: each run's summary and
  where its lines are) and of the next one, as wall-clock and as this process's CPU time
  (the server runs in it; on a loaded machine the wall-clock is mostly waiting for a CPU);
- the time to open a run (``GET /api/run/log:big.jsonl:1``: its lines read again, with
  its lists this time);
- the bytes of the first stream message for the last run (its latest rows) and the bytes
  per update per client once one more turn is appended (only what was added).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx

from innerloop._eventlog import SCHEMA
from innerloop.ui import Catalog, UIServer

MODEL = "claude-sonnet-4-5-20250929"
LOOP = ("assemble", "normalize", "call", "stream", "execute", "check")


def _turn(turn: int, t: float) -> Iterator[dict[str, Any]]:
    """The events of one model turn with one tool call (13 events)."""
    for source, target in zip(("check", *LOOP[:3]), LOOP[:4], strict=True):
        yield {"type": "transition", "source": source, "target": target, "guard": None, "t": t}
    for i in range(3):
        yield {"type": "text_delta", "index": 0, "text": f"word {i} ", "t": t}
    yield {"type": "tool_use_start", "index": 1, "id": f"c{turn}", "name": "add", "t": t}
    usage = {"input_tokens": 1200 + turn % 100, "output_tokens": 80, "cache_read_tokens": 0}
    response = {
        "message": {"role": "assistant", "content": []},
        "stop_reason": "tool_use",
        "usage": usage,
        "model": MODEL,
        "provider": "anthropic",
    }
    yield {"type": "model_response", "response": response, "turn": turn, "t": t}
    yield {
        "type": "transition",
        "source": "stream",
        "target": "execute",
        "guard": "has_tool_calls",
        "t": t,
    }
    yield {
        "type": "tool_executed",
        "tool_use_id": f"c{turn}",
        "name": "add",
        "is_error": False,
        "timed_out": False,
        "duration": 0.01,
        "output": "5",
        "t": t,
    }
    yield {"type": "transition", "source": "execute", "target": "check", "guard": None, "t": t}


def _run(events: int) -> Iterator[dict[str, Any]]:
    yield {
        "type": "run_started",
        "machine": "innerloop",
        "fingerprint": "bench",
        "import_path": None,
        "state": "idle",
        "t": 0.0,
    }
    turn, written = 0, 1
    while written < events - 1:
        turn += 1
        for event in _turn(turn, turn * 0.5):
            yield event
            written += 1
    yield {
        "type": "finished",
        "exit_reason": "max_turns_exceeded",
        "final_state": "check",
        "turns": turn,
        "usage": {"input_tokens": 0, "output_tokens": 0},
        "cost_usd": 1.0,
    }


def write_log(path: Path, events: int, per_run: int, open_end: bool) -> None:
    """``events`` events in runs of ``per_run``; the last run left open when ``open_end``."""
    with path.open("w") as f:
        f.write(json.dumps({"type": "log_header", "schema": SCHEMA}) + "\n")
        left = events
        while left > 0:
            size = min(per_run, left)
            lines = [json.dumps(e, separators=(",", ":")) for e in _run(size)]
            if open_end and left == size:
                lines = lines[:-1]
            f.write("\n".join(lines) + "\n")
            left -= size


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _messages(response: httpx.Response) -> Iterator[str]:
    """The data of each ``run`` message of a stream."""
    kind = ""
    for line in response.iter_lines():
        if line.startswith("event:"):
            kind = line.split(":", 1)[1].strip()
        elif line.startswith("data:") and kind == "run":
            yield line.split(":", 1)[1].strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--per-run", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "big.jsonl"
        write_log(log, args.events, args.per_run, open_end=True)
        size = log.stat().st_size / 1e6
        print(f"log: {args.events:,} events, {size:.1f} MB, runs of {args.per_run:,}")
        before = rss_mb()
        with UIServer(Catalog(Path(folder)), port=0) as server:
            started, cpu = time.perf_counter(), time.process_time()
            runs = httpx.get(server.url + "api/runs", timeout=600).json()
            first, first_cpu = time.perf_counter() - started, time.process_time() - cpu
            after = rss_mb()
            listed = runs.get("total", len(runs["runs"]))  # (older servers: no total)
            started = time.perf_counter()
            httpx.get(server.url + "api/runs", timeout=600)
            again = time.perf_counter() - started
            print(
                f"server memory: {before:.0f} MB before, {after:.0f} MB after the first "
                f"listing (+{after - before:.0f} MB)"
            )
            print(
                f"time to list {listed} runs: {first:.2f} s the first time ({first_cpu:.2f} s "
                f"of CPU; reading the log), {again * 1000:.1f} ms the next"
            )
            started, cpu = time.perf_counter(), time.process_time()
            opened = httpx.get(server.url + "api/run/log:big.jsonl:1", timeout=600).json()
            took, took_cpu = time.perf_counter() - started, time.process_time() - cpu
            print(
                f"time to open a run of {opened['events']:,} events: {took:.2f} s "
                f"({took_cpu:.2f} s of CPU); memory then {rss_mb():.0f} MB"
            )
            url = server.url + "api/events/log:big.jsonl:last"
            with httpx.stream("GET", url, timeout=60) as response:
                messages = _messages(response)
                opening = next(messages)
                with log.open("a") as f:
                    for event in _turn(10**6, 1.0):
                        f.write(json.dumps(event, separators=(",", ":")) + "\n")
                update = next(messages)
            print(
                f"stream: {len(opening.encode()):,} bytes for the first message (the "
                f"latest rows), {len(update.encode()):,} bytes per update per client "
                "(one turn appended)"
            )


if __name__ == "__main__":
    main()
