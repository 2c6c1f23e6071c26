"""Counting in the tokens of the model in use: a GGUF file's own vocabulary.

The default counter (tiktoken's ``cl100k_base``) is OpenAI's tokenizer. Other models split
text differently, most of all numbers and JSON: against SmolLM2's tokenizer it undercounts
prose by a few percent and JSON by more than half (docs/concepts/recovery.md has the
figures), so a context budget counted with it does not hold. :class:`GGUFTokenCounter`
counts with the tokenizer inside the model's GGUF file, through llama-cpp-python (the
``local`` extra) loaded with ``vocab_only=True``: no weights, no server call, the same
tokens the llama.cpp server counts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from innerloop.recovery._tokens import TokenizerDataError

__all__ = ["GGUFTokenCounter"]

INSTALL_HINT = (
    "GGUFTokenCounter reads the GGUF file with llama-cpp-python: pip install "
    "'innerloop[local]' (or llama-cpp-python alone)"
)


class GGUFTokenCounter:
    """Counts text in the tokens of the model whose GGUF file is ``gguf`` (its vocabulary
    only is loaded, in about a second). ``Harness(params, providers,
    token_counter=GGUFTokenCounter(path))`` makes the context budget, compaction and the
    usage counted for servers that report none hold in the model's own tokens."""

    def __init__(self, gguf: str | Path) -> None:
        path = Path(gguf)
        if not path.is_file():
            raise TokenizerDataError(f"{path} is not a GGUF file: no such file", path)
        try:
            import llama_cpp
        except ImportError as exc:
            raise TokenizerDataError(f"{INSTALL_HINT} ({exc})", path) from exc
        self.path = path
        self._vocab: Any = llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)

    def count_text(self, text: str) -> int:
        data = text.encode("utf-8", "replace")
        return len(self._vocab.tokenize(data, add_bos=False, special=False))

    def __repr__(self) -> str:
        return f"GGUFTokenCounter({self.path.name!r})"
