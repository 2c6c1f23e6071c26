"""Incremental token counting vs a full recount, on a 1,000-message, ~200k-token history.

Run: ``/tmp/v/bin/python bench/tokens.py`` (from the repository root). Prints the time of
a full recount of the history, the time of counting it again after one message was
appended (what the ``assemble`` phase does each turn), and their ratio. Target: the
incremental count takes at most 1% of the full recount's time.
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from innerloop._messages import Message, TextBlock, ToolResultBlock, ToolUseBlock
from innerloop.recovery import MessageTokenCache, TiktokenCounter

MESSAGES = 1000
APPENDS = 50
"""The last messages are appended one at a time, each append timed."""
WORDS_PER_MESSAGE = 136
FULL_REPEATS = 7


def make_history(rng: random.Random) -> list[Message]:
    """Alternating turns of prose, code-like text and tool call/result pairs."""
    vocabulary = [
        "the", "loop", "state", "token", "budget", "compact", "provider", "stream", "tool",
        "result", "error", "retry", "history", "message", "assistant", "user", "def", "return",
        "self", "None", "{", "}", "(", ")", "=", "->", "0", "42", "1.5", "path/to/file.py",
        "Überprüfung", "naïve", "日本語", "\n", "    ", "# note:", "assert", "await", "async",
    ]  # fmt: skip

    def text() -> str:
        n = rng.randint(WORDS_PER_MESSAGE // 2, WORDS_PER_MESSAGE * 3 // 2)
        return " ".join(rng.choice(vocabulary) for _ in range(n))

    history: list[Message] = []
    for i in range(MESSAGES):
        if i % 2 == 0:
            previous = history[-1] if history else None
            if previous is not None and previous.tool_uses:
                call = previous.tool_uses[0]
                history.append(Message.user([ToolResultBlock(call.id, text())]))
            else:
                history.append(Message.user(text()))
        elif i % 6 == 1:
            call = ToolUseBlock(f"toolu_{i}", "grep", {"pattern": text()[:80], "path": "src"})
            history.append(Message.assistant([TextBlock(text()), call]))
        else:
            history.append(Message.assistant(text()))
    return history


def main() -> None:
    counter = TiktokenCounter()
    history = make_history(random.Random(0))
    total = MessageTokenCache(counter).count_history(history)

    full = []
    for _ in range(FULL_REPEATS):
        start = time.perf_counter()
        MessageTokenCache(counter).count_history(history)
        full.append(time.perf_counter() - start)

    cache = MessageTokenCache(counter)
    growing = history[: MESSAGES - APPENDS]
    cache.count_history(growing)
    incremental = []
    for message in history[MESSAGES - APPENDS :]:
        growing.append(message)
        start = time.perf_counter()
        count = cache.count_history(growing)
        incremental.append(time.perf_counter() - start)
    assert count == total, (count, total)

    full_s = statistics.median(full)
    inc_s = statistics.median(incremental)
    ratio = inc_s / full_s
    print(f"history: {len(history)} messages, {total} tokens (cl100k_base, offline)")
    print(f"full recount:       {full_s * 1e3:8.2f} ms  (median of {FULL_REPEATS})")
    print(
        f"incremental count:  {inc_s * 1e6:8.1f} us  (median of {APPENDS} appends, "
        f"{total // MESSAGES} tokens a message on average)"
    )
    verdict = "met" if ratio <= 0.01 else "MISSED"
    print(f"ratio:              {ratio * 100:8.3f} %  (target <= 1%: {verdict})")


if __name__ == "__main__":
    main()
