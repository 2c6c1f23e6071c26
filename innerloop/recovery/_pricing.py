"""Per-model prices and the cost of a run.

Thinking tokens are output tokens and are billed at the output rate: there is no
thinking discount in this table, and none may be added.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from innerloop._messages import Usage

__all__ = ["DEFAULT_PRICES", "Price", "cost_usd", "price_for"]


@attrs.frozen
class Price:
    """US dollars per million tokens."""

    input: float
    output: float
    cache_read: float = 0.0
    cache_write: float = 0.0


DEFAULT_PRICES: Mapping[str, Price] = {
    # Anthropic (per MTok): cache read 0.1x input, cache write 1.25x input.
    "claude-opus-4": Price(15.0, 75.0, 1.5, 18.75),
    "claude-sonnet-4": Price(3.0, 15.0, 0.3, 3.75),
    "claude-haiku-4": Price(1.0, 5.0, 0.1, 1.25),
    "claude-3-5-haiku": Price(0.8, 4.0, 0.08, 1.0),
    # OpenAI (per MTok): cached input billed at the cache_read rate.
    "gpt-4o-mini": Price(0.15, 0.6, 0.075, 0.0),
    "gpt-4o": Price(2.5, 10.0, 1.25, 0.0),
    "gpt-4.1": Price(2.0, 8.0, 0.5, 0.0),
    "scripted": Price(0.0, 0.0),
}


def price_for(model: str, table: Mapping[str, Price]) -> Price | None:
    """The price of ``model``: an exact id, else the longest table key it starts with."""
    if model in table:
        return table[model]
    best = ""
    for key in table:
        if model.startswith(key) and len(key) > len(best):
            best = key
    return table[best] if best else None


def cost_usd(usage: Usage, model: str, table: Mapping[str, Price]) -> float | None:
    """Dollar cost of ``usage`` on ``model``; None when the model has no price."""
    price = price_for(model, table)
    if price is None:
        return None
    return (
        usage.input_tokens * price.input
        + usage.output_tokens * price.output
        + usage.cache_read_tokens * price.cache_read
        + usage.cache_creation_tokens * price.cache_write
    ) / 1_000_000
