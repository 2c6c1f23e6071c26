"""Serving the page: uvicorn on a background thread, so a run can go on in the foreground.

with UIServer(Catalog(runs_dir=Path("runs"))) as server:
    print(server.url)          # http://127.0.0.1:8321/
    ...                        # the page is served until the block ends
"""

from __future__ import annotations

import ipaddress
import secrets
import socket
import sys
import threading
import time
import urllib.parse
from types import TracebackType
from typing import Any

import uvicorn

from innerloop._harness import Harness
from innerloop.ui._answer import Answers
from innerloop.ui._app import create_app
from innerloop.ui._catalog import Catalog

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "UIServer", "is_loopback"]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8321
START_SECONDS = 10.0


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) is reachable from this machine only."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class UIServer:
    """The page for ``catalog`` on ``host:port`` (port 0: a free one), served from a
    daemon thread between :meth:`start` and :meth:`stop` (or as a context manager).

    On an address other than loopback it warns (one line on stderr, at :meth:`start`) and
    wants a per-launch ``token`` in every URL (:attr:`url` carries it).

    With ``harness`` (built as for ``innerloop runs resume``: the run's params, tools,
    providers and machine, and the checkpoint store that keeps it), the page answers the
    question a suspended run waits on: approve, deny or a typed answer, through
    ``harness.resume`` (:attr:`answers`)."""

    def __init__(
        self,
        catalog: Catalog,
        host: str = DEFAULT_HOST,
        port: int = DEFAULT_PORT,
        *,
        harness: Harness[Any] | None = None,
    ) -> None:
        self.catalog = catalog
        self.host = host
        self.token = None if is_loopback(host) else secrets.token_urlsafe(24)
        self.answers = Answers(harness) if harness is not None else None
        """What answers the page's answers (None: the page answers none)."""
        self._closing = threading.Event()
        app = create_app(catalog, self._closing, host=host, token=self.token, answers=self.answers)
        config = uvicorn.Config(
            app,
            host=host,
            port=port,
            loop="asyncio",
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=2,
        )
        self._server = uvicorn.Server(config)
        self._socket: socket.socket | None = None
        self._thread = threading.Thread(target=self._serve, name="innerloop-ui", daemon=True)
        self.port = port

    def _bind(self) -> socket.socket:
        """The listening socket, bound here so that a taken port or a bad host is an
        OSError in the caller's thread, naming the fix."""
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, self.port))
        except OSError as exc:
            sock.close()
            raise OSError(
                f"the live view cannot listen on {self.host}:{self.port}: "
                f"{exc.strerror or exc}; pick another port (0: a free one) or host"
            ) from None
        return sock

    def _serve(self) -> None:
        assert self._socket is not None
        self._server.run(sockets=[self._socket])

    def start(self) -> UIServer:
        """Start serving; returns once the page is served. OSError when it cannot be (the
        port is taken, the host is not an address of this machine)."""
        self._socket = self._bind()
        if self.token is not None:
            print(
                f"innerloop ui: warning: listening on {self.host}, not loopback: anyone who "
                "can reach it and has the URL's token can read the runs",
                file=sys.stderr,
                flush=True,
            )
        self.port = int(self._socket.getsockname()[1])
        self._thread.start()
        deadline = time.monotonic() + START_SECONDS
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise OSError(f"the live view did not start on {self.host}:{self.port}")
            time.sleep(0.01)
        return self

    @property
    def url(self) -> str:
        """The page (with its ``?token=`` when it wants one)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        token = f"?token={self.token}" if self.token else ""
        return f"http://{host}:{self.port}/{token}"

    def run_url(self, run_id: str) -> str:
        """The page of one run."""
        joiner = "&" if self.token else "?"
        return f"{self.url}{joiner}run={urllib.parse.quote(run_id, safe=':/')}"

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def stop(self) -> None:
        """Stop serving (live streams end first) and close the catalog's store."""
        self._closing.set()
        if self.answers is not None:
            self.answers.close()
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join()
        if self._socket is not None:
            self._socket.close()
        self.catalog.close()

    def __enter__(self) -> UIServer:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
