"""Prices: the host's table over the kept source (genai-prices), thinking billed as output."""

from __future__ import annotations

import subprocess
import sys

import pytest

from innerloop import HarnessParams
from innerloop._messages import Usage
from innerloop.lowlevel import add_cost
from innerloop.recovery import (
    DEFAULT_PRICES,
    Price,
    cost_usd,
    kept_price,
    merge_prices,
    price_for,
)


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
        """A model neither the table nor genai-prices knows costs None, and a run total
        stays unknown."""
        assert cost_usd(Usage(10, 10), "mystery", DEFAULT_PRICES) is None
        assert add_cost(1.0, Usage(10, 10), "mystery", DEFAULT_PRICES) is None
        assert add_cost(None, Usage(10, 10), "gpt-4o", DEFAULT_PRICES) is None
        assert add_cost(1.0, Usage(1_000_000), "gpt-4o", DEFAULT_PRICES) == 3.5

    def test_cache_tokens_take_the_kept_cache_rates(self) -> None:
        """A Claude model's cache reads cost 0.1x and its cache writes 1.25x its input."""
        usage = Usage(1_000_000, 0, 1_000_000, 1_000_000)
        assert cost_usd(usage, "claude-sonnet-4-5-20250929", DEFAULT_PRICES, "anthropic") == (
            pytest.approx(3.0 + 0.3 + 3.75)
        )


class TestKeptSource:
    @pytest.mark.parametrize(
        ("model", "provider", "price"),
        [
            ("claude-opus-4-5-20251101", "anthropic", Price(5.0, 25.0, 0.5, 6.25)),
            ("claude-opus-4-1-20250805", "anthropic", Price(15.0, 75.0, 1.5, 18.75)),
            ("claude-sonnet-4-5-20250929", "anthropic", Price(3.0, 15.0, 0.3, 3.75)),
            ("claude-haiku-4-5-20251001", "anthropic", Price(1.0, 5.0, 0.1, 1.25)),
            ("claude-3-5-haiku-20241022", "anthropic", Price(0.8, 4.0, 0.08, 1.0)),
            ("gpt-4o-mini-2024-07-18", "openai", Price(0.15, 0.6, 0.075)),
            ("gpt-4o-2024-08-06", "openai", Price(2.5, 10.0, 1.25)),
            ("gpt-5-mini-2025-08-07", "responses", Price(0.25, 2.0, 0.025)),
            ("o4-mini", "openai", Price(1.1, 4.4, 0.275)),
        ],
    )
    def test_dated_ids_take_the_kept_list_price(
        self, model: str, provider: str, price: Price
    ) -> None:
        """Anthropic and OpenAI models are priced from genai-prices at their list prices
        (the figures innerloop's own table held before), dated ids included."""
        assert price_for(model, DEFAULT_PRICES, provider) == price
        assert kept_price(model) == price  # found by the model id alone too

    def test_gemini_is_priced_behind_an_openai_compatible_endpoint(self) -> None:
        """A Gemini model served through the OpenAI provider (Google's OpenAI-compatible
        endpoint) is priced as Gemini: the model id is tried alone when the provider lacks
        it."""
        assert kept_price("gemini-2.5-flash", "openai") == Price(0.3, 2.5, 0.03)
        assert kept_price("gemini-2.5-flash", "gemini") == Price(0.3, 2.5, 0.03)

    @pytest.mark.parametrize("provider", ["openai", "local", None])
    def test_a_local_model_has_no_price(self, provider: str | None) -> None:
        """A model only a local server knows has no price: its cost is unknown (None)."""
        assert kept_price("llama3", provider) is None
        assert cost_usd(Usage(10, 10), "llama3", DEFAULT_PRICES, provider) is None

    def test_scripted_models_are_priced_by_the_table_alone(self) -> None:
        """The default table prices the scripted stand-in models at zero; a scripted reply
        under a real model's id is not priced by the kept source (its cost is not real)."""
        assert price_for("scripted-model", DEFAULT_PRICES, "scripted") == Price(0.0, 0.0)
        assert price_for("gpt-4o", DEFAULT_PRICES, "scripted") is None
        assert price_for("gpt-4o", {"gpt-4o": Price(1.0, 1.0)}, "scripted") == Price(1.0, 1.0)

    def test_import_does_not_load_the_kept_source(self) -> None:
        """``import innerloop`` leaves genai-prices unloaded until a price is asked for."""
        code = (
            "import sys, innerloop; print('genai_prices' in sys.modules); "
            "from innerloop.recovery import kept_price; kept_price('gpt-4o'); "
            "print('genai_prices' in sys.modules)"
        )
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        )
        assert out.stdout.split() == ["False", "True"]


class TestTable:
    def test_overrides_win_over_the_kept_source(self) -> None:
        """merge_prices puts the host's prices over the defaults and over genai-prices: an
        exact id or the longest prefix of the host's table wins."""
        table = merge_prices({"gpt-4o": Price(1.0, 1.0), "house-model": Price(0.5, 0.5)})
        assert table["gpt-4o"] == Price(1.0, 1.0)
        assert table["house-model"] == Price(0.5, 0.5)
        assert table["scripted"] == DEFAULT_PRICES["scripted"]
        assert price_for("gpt-4o-2024-08-06", DEFAULT_PRICES, "openai") == Price(2.5, 10.0, 1.25)
        params = HarnessParams(model="openai:gpt-4o", prices=table)
        assert price_for("gpt-4o-2024-08-06", params.prices, "openai") == Price(1.0, 1.0)
        assert price_for("house-model-7b", params.prices, "local") == Price(0.5, 0.5)

    def test_a_free_local_model_is_priced_by_the_host(self) -> None:
        """A host states that its local model is free; its cost is then 0, not unknown."""
        table = merge_prices({"llama3": Price(0.0, 0.0)})
        assert cost_usd(Usage(1000, 1000), "llama3:8b", table, "local") == 0.0

    def test_defaults_are_read_only(self) -> None:
        """The default table cannot be changed in place."""
        with pytest.raises(TypeError):
            DEFAULT_PRICES["gpt-4o"] = Price(0.0, 0.0)  # type: ignore[index]
