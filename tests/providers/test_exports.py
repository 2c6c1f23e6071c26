"""The providers package and the testing servers export exactly what they list."""

from __future__ import annotations

import asyncio

import pytest

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


ANTHROPIC_VARS = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_PROFILE")


@pytest.mark.parametrize(
    ("cls", "variable"),
    [(AnthropicProvider, "ANTHROPIC_API_KEY"), (OpenAIProvider, "OPENAI_API_KEY")],
)
@pytest.mark.parametrize("key", [None, ""])
def test_no_key_is_refused_at_construction_by_both(
    cls: type, variable: str, key: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a key both providers raise the same error, naming the argument and the
    variable (before, AnthropicProvider built and every run failed)."""
    for name in (*ANTHROPIC_VARS, "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ValueError, match="has no API key") as caught:
        cls(key)
    assert str(caught.value).startswith(
        f"{cls.__name__} has no API key: pass api_key=..., or set {variable} in the environment"
    )


@pytest.mark.parametrize(
    ("cls", "variable"),
    [
        (AnthropicProvider, "ANTHROPIC_API_KEY"),
        (AnthropicProvider, "ANTHROPIC_AUTH_TOKEN"),
        (OpenAIProvider, "OPENAI_API_KEY"),
    ],
)
def test_a_key_from_the_environment_is_enough(
    cls: type, variable: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in (*ANTHROPIC_VARS, "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(variable, "sk-test-from-the-environment-0000")
    provider = cls(base_url="http://127.0.0.1:9")
    asyncio.run(provider.aclose())


def test_a_local_openai_compatible_server_needs_no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    provider = OpenAIProvider(base_url="http://127.0.0.1:9/v1")
    asyncio.run(provider.aclose())
