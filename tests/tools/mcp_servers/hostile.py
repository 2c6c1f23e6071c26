"""A hostile MCP server for innerloop's tests: plain JSON-RPC over stdio, one message a
line, written by hand (no SDK) so it can break the protocol's good manners on purpose.

``hostile.py MODE [N]``; every mode answers ``initialize`` and offers the tool ``pages``
(how many ``tools/list`` requests it has answered) and ``announce`` (sends
``notifications/tools/list_changed``; from then on, in ``endless-after-announce``, every
listing pages forever). Modes:

- ``endless``: every ``tools/list`` page has one tool and a next cursor, forever.
- ``endless-after-announce``: one honest page until ``announce`` is called.
- ``many N``: one page of N tools.
- ``many-after-announce N``: one honest page until ``announce`` is called, then one page
  of N tools.
- ``wide N``: one more tool, ``wide``, whose input schema has N properties.
- ``tall N``: one more tool, ``tall``, whose input schema nests N objects.
- ``stall``: answers the first page with a next cursor, then never answers ``tools/list``.
- ``stall-after-announce``: never answers ``tools/list`` once ``announce`` was called.
- ``deep N``: ``deep`` returns structured content nested N levels deep, and no text.
- ``chatty``: once ``announce`` was called, every ``tools/list`` answer is followed by
  another ``notifications/tools/list_changed``.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def tool(name: str, properties: int = 0) -> dict[str, Any]:
    schema = {
        "type": "object",
        "properties": {f"p{i}": {"type": "string"} for i in range(properties)},
    }
    return {"name": name, "description": f"The tool {name}.", "inputSchema": schema}


def nested(depth: int) -> str:
    """JSON text of objects nested ``depth`` levels (built as text: json.dumps of it would
    recurse)."""
    return '{"a": ' * (depth - 1) + "{}" + "}" * (depth - 1)


def send(message: dict[str, Any], raw: str = "") -> None:
    """Write ``message``; ``raw`` (JSON text) is put in for the string "RAW"."""
    line = json.dumps({"jsonrpc": "2.0", **message}).replace('"RAW"', raw)
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


class Hostile:
    def __init__(self, mode: str, size: int) -> None:
        self.mode = mode
        self.size = size
        self.listed = 0
        self.announced = False
        self.base = [tool("pages"), tool("announce"), tool("deep")]

    def listing(self, cursor: str | None) -> dict[str, Any] | None:
        """A tools/list page, or None to leave the request unanswered."""
        page, mode = int(cursor or "0"), self.mode
        if mode == "endless" or (mode == "endless-after-announce" and self.announced):
            return {
                "tools": [*self.base, tool(f"t{page}")] if page == 0 else [tool(f"t{page}")],
                "nextCursor": str(page + 1),
            }
        if mode == "many" or (mode == "many-after-announce" and self.announced):
            return {"tools": [*self.base, *(tool(f"t{i}") for i in range(self.size))]}
        if mode == "wide":
            return {"tools": [*self.base, tool("wide", self.size)]}
        if mode == "tall":
            tall = tool("tall")
            for _ in range(self.size):
                tall["inputSchema"] = {"type": "object", "properties": {"a": tall["inputSchema"]}}
            return {"tools": [*self.base, tall]}
        if mode == "stall":
            return {"tools": self.base, "nextCursor": "1"} if page == 0 else None
        if mode == "stall-after-announce" and self.announced:
            return None
        return {"tools": self.base}

    def call(self, ident: Any, name: str) -> None:
        if name == "announce":
            self.announced = True
            send({"method": "notifications/tools/list_changed"})
            text = "announced"
        elif name == "deep":
            result = {"content": [], "structuredContent": "RAW"}
            send({"id": ident, "result": result}, nested(self.size))
            return
        else:
            text = str(self.listed)
        send({"id": ident, "result": {"content": [{"type": "text", "text": text}]}})

    def handle(self, message: dict[str, Any]) -> None:
        method, ident = message.get("method"), message.get("id")
        if ident is None:
            return  # a notification
        if method == "initialize":
            result = {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {"listChanged": True}},
                "serverInfo": {"name": "hostile", "version": "1"},
            }
            send({"id": ident, "result": result})
        elif method == "tools/list":
            self.listed += 1
            page = self.listing((message.get("params") or {}).get("cursor"))
            if page is not None:
                send({"id": ident, "result": page})
                if self.mode == "chatty" and self.announced:
                    send({"method": "notifications/tools/list_changed"})
        elif method == "tools/call":
            self.call(ident, message["params"]["name"])
        else:
            send({"id": ident, "error": {"code": -32601, "message": f"no method {method}"}})


def main() -> None:
    server = Hostile(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 0)
    for line in sys.stdin:
        server.handle(json.loads(line))


if __name__ == "__main__":
    main()
