"""Serving the page: uvicorn on a background thread, so a run can go on in the foreground.

with UIServer(Catalog(runs_dir=Path("runs"))) as server:
    print(server.url)          # http://127.0.0.1:8321/
    ...                        # the page is served until the block ends
"""

from __future__ import annotations

import threading
import time
import urllib.parse
from types import TracebackType

import uvicorn

from innerloop.ui._app import create_app
from innerloop.ui._catalog import Catalog

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "UIServer"]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8321
START_SECONDS = 10.0


class UIServer:
    """The page for ``catalog`` on ``host:port`` (port 0: a free one), served from a
    daemon thread between :meth:`start` and :meth:`stop` (or as a context manager)."""

    def __init__(
        self, catalog: Catalog, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT
    ) -> None:
        self.catalog = catalog
        self.host = host
        self._closing = threading.Event()
        config = uvicorn.Config(
            create_app(catalog, self._closing),
            host=host,
            port=port,
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=2,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="innerloop-ui", daemon=True)
        self.port = port

    def start(self) -> UIServer:
        """Start serving; returns when the socket listens. OSError when it cannot (the port
        is taken, the host is not an address of this machine)."""
        self._thread.start()
        deadline = time.monotonic() + START_SECONDS
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise OSError(
                    f"the live view could not listen on {self.host}:{self.port} (is the port "
                    "taken? pick another with --port, or 0 for a free one)"
                )
            time.sleep(0.01)
        sockets = [s for server in self._server.servers for s in server.sockets]
        self.port = int(sockets[0].getsockname()[1])
        return self

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    def run_url(self, run_id: str) -> str:
        """The page of one run."""
        return f"{self.url}?run={urllib.parse.quote(run_id, safe=':/')}"

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def stop(self) -> None:
        """Stop serving (live streams end first) and close the catalog's store."""
        self._closing.set()
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join()
        self.catalog.close()

    def __enter__(self) -> UIServer:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
