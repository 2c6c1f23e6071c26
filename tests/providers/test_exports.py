"""The providers package and the testing servers export exactly what they list."""

from __future__ import annotations

import innerloop.providers
import innerloop.testing
from innerloop.providers import AnthropicProvider, OpenAIProvider, Provider


def test_all_is_sorted_and_resolves() -> None:
    """Every name in ``__all__`` exists, and the lists are sorted."""
    for module in (innerloop.providers, innerloop.testing):
        assert module.__all__ == sorted(module.__all__)
        for name in module.__all__:
            assert hasattr(module, name), f"{module.__name__}.{name}"


def test_providers_satisfy_the_protocol() -> None:
    """Both SDK-backed providers are Providers with their dialect and a one-call helper."""
    for cls, dialect in ((AnthropicProvider, "anthropic"), (OpenAIProvider, "openai")):
        provider = cls("sk-test-0000000000000000", base_url="http://127.0.0.1:9")
        assert isinstance(provider, Provider)
        assert provider.dialect == dialect
        assert callable(provider.complete)
        assert repr(provider).startswith(f"{cls.__name__}(name='{dialect}'")
