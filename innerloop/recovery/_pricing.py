"""Per-model prices and the cost of a run.

Thinking tokens are output tokens and are billed at the output rate: there is no
thinking discount in this table, and none may be added.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

import attrs

from innerloop._messages import Usage
from innerloop._validators import number

__all__ = ["DEFAULT_PRICES", "Price", "add_cost", "cost_usd", "merge_prices", "price_for"]

_rate = number(ge=0, prefix="price.")


@attrs.frozen
class Price:
    """US dollars per million tokens. Thinking tokens are output tokens (``output``)."""

    input: float = attrs.field(validator=_rate)
    output: float = attrs.field(validator=_rate)
    cache_read: float = attrs.field(default=0.0, validator=_rate)
    cache_write: float = attrs.field(default=0.0, validator=_rate)


DEFAULT_PRICES: Mapping[str, Price] = MappingProxyType(
    {
        # Anthropic list prices (USD per MTok): cache read 0.1x input, 5-minute cache write
        # 1.25x input.
        "claude-opus-4-5": Price(5.0, 25.0, 0.5, 6.25),
        "claude-opus-4": Price(15.0, 75.0, 1.5, 18.75),
        "claude-sonnet-4": Price(3.0, 15.0, 0.3, 3.75),
        "claude-3-7-sonnet": Price(3.0, 15.0, 0.3, 3.75),
        "claude-haiku-4": Price(1.0, 5.0, 0.1, 1.25),
        "claude-3-5-haiku": Price(0.8, 4.0, 0.08, 1.0),
        "claude-3-haiku": Price(0.25, 1.25, 0.03, 0.3),
        # OpenAI list prices (USD per MTok): cached input billed at the cache_read rate.
        "gpt-5": Price(1.25, 10.0, 0.125),
        "gpt-5-mini": Price(0.25, 2.0, 0.025),
        "gpt-5-nano": Price(0.05, 0.4, 0.005),
        "gpt-5-pro": Price(15.0, 120.0),
        "gpt-4.1": Price(2.0, 8.0, 0.5),
        "gpt-4.1-mini": Price(0.4, 1.6, 0.1),
        "gpt-4.1-nano": Price(0.1, 0.4, 0.025),
        "gpt-4o": Price(2.5, 10.0, 1.25),
        "gpt-4o-mini": Price(0.15, 0.6, 0.075),
        "o3": Price(2.0, 8.0, 0.5),
        "o3-mini": Price(1.1, 4.4, 0.55),
        "o3-pro": Price(20.0, 80.0),
        "o4-mini": Price(1.1, 4.4, 0.275),
        "scripted": Price(0.0, 0.0),
    }
)
"""Keys match a model id exactly or as its longest prefix (``claude-sonnet-4`` prices
``claude-sonnet-4-5-20250929``). Check them against the providers' price pages; override
with :func:`merge_prices`."""


def merge_prices(
    overrides: Mapping[str, Price], base: Mapping[str, Price] = DEFAULT_PRICES
) -> Mapping[str, Price]:
    """``base`` with ``overrides`` added or replacing entries, e.g.
    ``HarnessParams(prices=merge_prices({"my-model": Price(1.0, 2.0)}))``."""
    merged = dict(base)
    merged.update(overrides)
    return MappingProxyType(merged)


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


def add_cost(
    total: float | None, usage: Usage, model: str, table: Mapping[str, Price]
) -> float | None:
    """``total`` plus the cost of ``usage`` on ``model``; None (unknown) once any usage was
    on a model without a price."""
    cost = cost_usd(usage, model, table)
    if total is None or cost is None:
        return None
    return total + cost
