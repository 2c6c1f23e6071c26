"""Per-model prices and the cost of a run.

A model's price comes from the host's table (``HarnessParams.prices``: exact id or longest
prefix) and, failing that, from the kept source: the ``genai-prices`` package, whose
bundled data is read the first time a process asks (it is not imported before).

Thinking tokens are output tokens and are billed at the output rate: there is no
thinking discount in this table, and none may be added.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from datetime import UTC, datetime
from types import MappingProxyType

import attrs

from innerloop._messages import Usage
from innerloop._validators import number

__all__ = [
    "DEFAULT_PRICES",
    "Price",
    "add_cost",
    "cost_usd",
    "kept_price",
    "merge_prices",
    "price_for",
]

_rate = number(ge=0, prefix="price.")


@attrs.frozen
class Price:
    """US dollars per million tokens. Thinking tokens are output tokens (``output``)."""

    input: float = attrs.field(validator=_rate)
    output: float = attrs.field(validator=_rate)
    cache_read: float = attrs.field(default=0.0, validator=_rate)
    cache_write: float = attrs.field(default=0.0, validator=_rate)


DEFAULT_PRICES: Mapping[str, Price] = MappingProxyType({"scripted": Price(0.0, 0.0)})
"""The host's price table by default: the scripted stand-in models (ids starting with
``scripted``) are free. Every other model is priced from the kept source, the
``genai-prices`` package (:func:`kept_price`); a host table made with :func:`merge_prices`
wins over it. Keys match a model id exactly or as its longest prefix (``claude-sonnet-4``
prices ``claude-sonnet-4-5-20250929``)."""

_KEPT_IDS: Mapping[str, str] = MappingProxyType(
    {"responses": "openai", "bedrock": "aws", "gemini": "google", "vertex": "google"}
)
"""innerloop provider names that genai-prices knows under another id; any other name is
looked up as it is (``anthropic``, ``openai``, ``google``, ``groq``, ``mistral``...)."""

_TABLE_ONLY = frozenset({"scripted"})
"""Providers whose replies are canned (innerloop.testing's scripted provider): their models
are priced by the host's table alone, never by the kept source."""


@functools.cache
def kept_price(model: str, provider: str | None = None) -> Price | None:
    """The price genai-prices keeps for ``model``, read once per process: under
    ``provider`` first (an innerloop provider name, e.g. ``anthropic`` or ``openai``), then
    by the model id alone (so ``gemini-2.5-flash`` behind an OpenAI-compatible endpoint is
    priced as Gemini); None when neither finds it (a local model: no price) and for the
    scripted provider, whose canned replies only the host's table prices. A model priced
    in tiers by request size is priced at its base tier; the prices in force when the
    process first asks are kept for its life."""
    if provider in _TABLE_ONLY:
        return None
    from genai_prices import data_snapshot  # 0.2 s and 30k lines: loaded on first use

    snapshot = data_snapshot.get_snapshot()
    found = None
    for provider_id in dict.fromkeys(
        (_KEPT_IDS.get(provider, provider) if provider else None, None)
    ):
        try:
            found = snapshot.find_provider_model(model, None, provider_id, None)[1]
            break
        except LookupError:
            continue
    if found is None:
        return None
    prices = found.get_prices(datetime.now(UTC))
    rates = [_base(getattr(prices, f"{kind}_mtok", None)) for kind in _KINDS]
    if rates[0] is None or rates[1] is None:
        return None  # priced per image, second or request: not by tokens
    return Price(*(0.0 if rate is None else rate for rate in rates))


_KINDS = ("input", "output", "cache_read", "cache_write")


def _base(rate: object) -> float | None:
    """A genai-prices rate as dollars per million tokens: a tiered rate's base tier."""
    if rate is None:
        return None
    return float(getattr(rate, "base", rate))  # type: ignore[arg-type]


def merge_prices(
    overrides: Mapping[str, Price], base: Mapping[str, Price] = DEFAULT_PRICES
) -> Mapping[str, Price]:
    """``base`` with ``overrides`` added or replacing entries, e.g.
    ``HarnessParams(prices=merge_prices({"my-model": Price(1.0, 2.0)}))``."""
    merged = dict(base)
    merged.update(overrides)
    return MappingProxyType(merged)


def price_for(model: str, table: Mapping[str, Price], provider: str | None = None) -> Price | None:
    """The price of ``model``: an exact id in ``table``, else the longest table key it starts
    with, else the kept source's price (:func:`kept_price`, looked up under ``provider``
    first); None when none has one."""
    if model in table:
        return table[model]
    best = ""
    for key in table:
        if model.startswith(key) and len(key) > len(best):
            best = key
    return table[best] if best else kept_price(model, provider)


def cost_usd(
    usage: Usage, model: str, table: Mapping[str, Price], provider: str | None = None
) -> float | None:
    """Dollar cost of ``usage`` on ``model`` (served by ``provider``); None when the model
    has no price."""
    price = price_for(model, table, provider)
    if price is None:
        return None
    return (
        usage.input_tokens * price.input
        + usage.output_tokens * price.output
        + usage.cache_read_tokens * price.cache_read
        + usage.cache_creation_tokens * price.cache_write
    ) / 1_000_000


def add_cost(
    total: float | None,
    usage: Usage,
    model: str,
    table: Mapping[str, Price],
    provider: str | None = None,
) -> float | None:
    """``total`` plus the cost of ``usage`` on ``model``; None (unknown) once any usage was
    on a model without a price."""
    if total is None:
        return None
    cost = cost_usd(usage, model, table, provider)
    return None if cost is None else total + cost
