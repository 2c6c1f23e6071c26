"""A tiny loopback HTTP server answering Anthropic's count-tokens endpoint, for tests."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import attrs

COUNT_PATH = "/v1/messages/count_tokens"


@attrs.define
class CountServer:
    """Answers each count with the next of ``answers``: an int is a token count, a
    ``(status, body)`` pair an error response. Every request body is kept."""

    answers: list[int | tuple[int, dict[str, Any]]]
    bodies: list[dict[str, Any]] = attrs.Factory(list)
    paths: list[str] = attrs.Factory(list)
    url: str = ""


@contextmanager
def count_server(*answers: int | tuple[int, dict[str, Any]]) -> Iterator[CountServer]:
    """Serve on 127.0.0.1 (a free port) until the block ends."""
    spec = CountServer(list(answers))

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", "0"))
            spec.paths.append(self.path)
            spec.bodies.append(json.loads(self.rfile.read(length) or b"{}"))
            answer = spec.answers.pop(0)
            status, body = (200, {"input_tokens": answer}) if isinstance(answer, int) else answer
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    spec.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield spec
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
