"""A long conversation: time and checkpoint bytes per message stay flat as it grows.

One :class:`~innerloop.Session` takes ``--messages`` messages (10,000 by default), each a
run of one model turn against a scripted model, with its events read (``send_sync``
reads them, so every model call is fingerprinted and every finished run hashes its
history) and checkpointed into a SQLite file at each turn. At messages 100, 1,000 and
10,000 (and every ``--messages`` below them) it prints the time per message over the
last ``--window`` messages before it (wall time, and CPU time: ``process_time``, the
steadier of the two on a shared machine) and the store's bytes per message so far
(``stored_bytes() / messages``), and at the end each figure against the first mark's:
the target is the last within 1.2x the first.

Usage: ``python bench/longchat.py [--messages 10000] [--window 100]``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from innerloop import Harness, HarnessParams
from innerloop.checkpoint import open_checkpointer
from innerloop.testing import ScriptedProvider, reply

MARKS = (100, 1_000, 10_000)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--window", type=int, default=100, help="messages timed per mark")
    args = parser.parse_args()
    marks = [m for m in MARKS if m <= args.messages] or [args.messages]
    with tempfile.TemporaryDirectory() as folder:
        store = open_checkpointer(f"sqlite:///{Path(folder) / 'chat.db'}")
        script = ScriptedProvider(
            # no request kept, as a real provider keeps none: a kept request holds its
            # messages, so the next one would copy them instead of going on with them
            [reply(f"Answer number {i:05d}.") for i in range(args.messages)],
            keep_requests=0,
        )
        harness = Harness(
            HarnessParams(model="scripted:model-20250101"),
            [script],
            checkpointer=store,
            checkpoint_every="turn",
        )
        session = harness.session("long")
        rows: list[tuple[int, float, float, float]] = []
        print(f"{'message':>8} {'ms/message':>11} {'cpu ms/message':>15} {'bytes/message':>14}")
        starts = {m - args.window + 1 for m in marks}
        with harness:
            started, cpu = time.perf_counter(), time.process_time()
            for n in range(1, args.messages + 1):
                if n in starts:
                    started, cpu = time.perf_counter(), time.process_time()
                state = session.send_sync(f"Question number {n:05d}?")
                if n in marks:
                    count = min(args.window, n)
                    ms = (time.perf_counter() - started) * 1000 / count
                    cpu_ms = (time.process_time() - cpu) * 1000 / count
                    per = store.stored_bytes() / n
                    rows.append((n, ms, cpu_ms, per))
                    print(f"{n:>8} {ms:>11.2f} {cpu_ms:>15.2f} {per:>14.1f}", flush=True)
        assert state.exit_reason == "model_complete", state.exit_reason
        store.close()
    first, last = rows[0], rows[-1]
    print(
        f"last/first: time {last[1] / first[1]:.2f}x, cpu {last[2] / first[2]:.2f}x, "
        f"bytes {last[3] / first[3]:.2f}x (target: each within 1.2x)"
    )


if __name__ == "__main__":
    main()
