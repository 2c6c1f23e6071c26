"""An MCP server whose one ``tools/list`` page holds tens of thousands of tools.

Runs the hostile test server (``tests/tools/mcp_servers/hostile.py many N``, over stdio)
and lists its tools with ``MCPServer(connect_timeout=...)``, once with the default
``max_message_bytes`` and once with it raised past the page (the SDK then reads it), and
prints for each: how it ended (the tools, or the error's first words), the seconds it
took, the longest the event loop went without running a 10 ms heartbeat, and this
process's CPU time.

    python bench/mcp_page.py                 # 50,000 tools, connect_timeout 5
    python bench/mcp_page.py --tools 20000 --connect-timeout 30
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from innerloop.tools import MCPServer, MCPServerError  # noqa: E402

HOSTILE = str(ROOT / "tests" / "tools" / "mcp_servers" / "hostile.py")


async def listing(tools: int, connect_timeout: float, limit: int | None) -> str:
    bound = {} if limit is None else {"max_message_bytes": limit}
    server = MCPServer.stdio(
        sys.executable,
        [HOSTILE, "many", str(tools)],
        name="hostile",
        connect_timeout=connect_timeout,
        max_tools=tools + 3,
        **bound,
    )
    gaps = [0.0]

    async def heartbeat() -> None:
        last = time.perf_counter()
        while True:
            await asyncio.sleep(0.01)
            now = time.perf_counter()
            gaps.append(now - last - 0.01)
            last = now

    beat = asyncio.create_task(heartbeat())
    started, cpu = time.perf_counter(), time.process_time()
    try:
        outcome = f"listed {len(await server.tools()):,} tools"
    except MCPServerError as exc:
        outcome = "refused: " + str(exc)[:90] + "..."
    took, took_cpu = time.perf_counter() - started, time.process_time() - cpu
    beat.cancel()
    await server.aclose()
    return (
        f"{outcome}\n  {took:.2f} s ({took_cpu:.2f} s of CPU), the loop stalled "
        f"{max(gaps):.2f} s at most"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tools", type=int, default=50_000)
    parser.add_argument("--connect-timeout", type=float, default=5.0)
    args = parser.parse_args()
    print(f"one page of {args.tools:,} tools, connect_timeout={args.connect_timeout:g}")
    default = asyncio.run(listing(args.tools, args.connect_timeout, None))
    print("default max_message_bytes:", default)
    print(
        "max_message_bytes raised to 1 GB:",
        asyncio.run(listing(args.tools, args.connect_timeout, 1 << 30)),
    )


if __name__ == "__main__":
    main()
