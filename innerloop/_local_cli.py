"""``innerloop run --local``: the run against a small model this machine serves itself.

innerloop starts llama-cpp-python's server (innerloop.local.LocalModelServer) on a free
loopback port, points the run's primary model at it (provider openai, no key, the model
priced at zero), and stops the server when the run ends, however it ends.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["LOCAL_MAX_OUTPUT_TOKENS", "add_local_option", "local_prices", "serving_locally"]

LOCAL_MAX_OUTPUT_TOKENS = 512
"""--max-output-tokens with --local unless given: the bundled model's context is 2,048."""


def add_local_option(run: argparse.ArgumentParser) -> None:
    run.add_argument(
        "--local",
        action="store_true",
        help="run against a small model served on this machine (llama.cpp with "
        "SmolLM2-135M-Instruct, or the GGUF file --model names); needs no key: "
        "pip install 'innerloop[local]'",
    )


@contextlib.contextmanager
def serving_locally(args: argparse.Namespace, usage_error: type[Exception]) -> Iterator[None]:
    """With ``--local``: the model server running while the block runs, and ``args``
    pointed at it (provider, base URL, model id: the GGUF file's name without .gguf);
    without it, nothing."""
    if not getattr(args, "local", False):
        yield
        return
    if args.base_url is not None:
        raise usage_error(
            "--local serves its own model: drop --base-url, or drop --local to use the "
            "server at --base-url"
        )
    from innerloop.local import LocalModelError, LocalModelServer, bundled_gguf

    try:
        gguf = bundled_gguf() if args.model is None else Path(args.model)
        server = LocalModelServer(gguf, model_alias=gguf.stem)
        print(
            f"innerloop: starting llama.cpp with {server.gguf.name} on {server.base_url}",
            file=sys.stderr,
        )
        server.start()
    except LocalModelError as exc:
        raise usage_error(f"--local: {exc}") from None
    try:
        print(f"innerloop: the local model answers (server pid {server.pid})", file=sys.stderr)
        args.provider, args.base_url, args.model = "openai", server.base_url, server.model
        yield
    finally:
        server.stop()


def local_prices(args: argparse.Namespace, prices: dict[str, Any] | None) -> dict[str, Any] | None:
    """The price table of a ``--local`` run: the local model is free (unless ``prices``,
    the --prices table, has it); ``prices`` unchanged without --local."""
    if not getattr(args, "local", False):
        return prices
    from innerloop.recovery import DEFAULT_PRICES, Price

    table = dict(prices if prices is not None else DEFAULT_PRICES)
    table.setdefault(args.model, Price(0.0, 0.0))
    return table
