"""Prices: per-model table, user overrides, thinking billed as output."""

from __future__ import annotations

import pytest

from innerloop import HarnessParams
from innerloop._messages import Usage
from innerloop.lowlevel import add_cost
from innerloop.recovery import DEFAULT_PRICES, Price, cost_usd, merge_prices, price_for


class TestCost:
    def test_thinking_tokens_cost_the_output_rate(self) -> None:
        """Output tokens that were thinking cost exactly as much as any output token."""
        table = {"m": Price(3.0, 15.0)}
        with_thinking = cost_usd(Usage(1000, 500, thinking_tokens=400), "m", table)
        assert with_thinking == cost_usd(Usage(1000, 500), "m", table)
        assert with_thinking == (1000 * 3.0 + 500 * 15.0) / 1_000_000

    def test_every_usage_kind_has_its_rate(self) -> None:
        """Input, output, cache reads and cache writes each use their own price."""
        usage = Usage(1_000_000, 1_000_000, 1_000_000, 1_000_000)
        assert cost_usd(usage, "m", {"m": Price(1.0, 2.0, 0.5, 4.0)}) == 7.5

    def test_unknown_model_has_no_cost(self) -> None:
        """A model missing from the table costs None, and a run total stays unknown."""
        assert cost_usd(Usage(10, 10), "mystery", DEFAULT_PRICES) is None
        assert add_cost(1.0, Usage(10, 10), "mystery", DEFAULT_PRICES) is None
        assert add_cost(None, Usage(10, 10), "gpt-4o", DEFAULT_PRICES) is None
        assert add_cost(1.0, Usage(1_000_000), "gpt-4o", DEFAULT_PRICES) == 3.5


class TestTable:
    @pytest.mark.parametrize(
        ("model", "key"),
        [
            ("claude-opus-4-5-20251101", "claude-opus-4-5"),
            ("claude-opus-4-1-20250805", "claude-opus-4"),
            ("claude-sonnet-4-5-20250929", "claude-sonnet-4"),
            ("claude-haiku-4-5-20251001", "claude-haiku-4"),
            ("gpt-4o-mini-2024-07-18", "gpt-4o-mini"),
            ("gpt-4o-2024-08-06", "gpt-4o"),
            ("gpt-5-mini-2025-08-07", "gpt-5-mini"),
        ],
    )
    def test_dated_ids_take_the_longest_matching_key(self, model: str, key: str) -> None:
        """A dated model id is priced by the longest table key it starts with."""
        assert price_for(model, DEFAULT_PRICES) == DEFAULT_PRICES[key]

    def test_overrides_replace_and_add_entries(self) -> None:
        """merge_prices puts the user's prices over the defaults, which stay otherwise."""
        table = merge_prices({"gpt-4o": Price(1.0, 1.0), "house-model": Price(0.5, 0.5)})
        assert table["gpt-4o"] == Price(1.0, 1.0)
        assert table["house-model"] == Price(0.5, 0.5)
        assert table["claude-opus-4"] == DEFAULT_PRICES["claude-opus-4"]
        assert DEFAULT_PRICES["gpt-4o"] == Price(2.5, 10.0, 1.25)
        params = HarnessParams(model="openai:gpt-4o", prices=table)
        assert price_for("gpt-4o-2024-08-06", params.prices) == Price(1.0, 1.0)

    def test_defaults_are_read_only(self) -> None:
        """The default table cannot be changed in place."""
        with pytest.raises(TypeError):
            DEFAULT_PRICES["gpt-4o"] = Price(0.0, 0.0)  # type: ignore[index]
