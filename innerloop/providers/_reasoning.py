"""What reasoning control each model family takes, by model id prefix.

One ``HarnessParams.thinking`` sets reasoning for every model in the chain: Anthropic's
thinking budget (or adaptive thinking, and an effort level, on the models that take them),
OpenAI's reasoning effort on Chat Completions and the Responses API. The params check it
against each known family at construction; a request carries only what its model takes.
A model of no known family (a local server, a scripted provider) gets what is set.
Amazon Bedrock's ids (``anthropic.claude-...-v1:0``, and the cross-region
``us.anthropic.claude-...``) are read as the Claude model they name.
"""

from __future__ import annotations

import functools
import re

import attrs

__all__ = ["EFFORTS", "ReasoningFamily", "family_of"]

EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
"""Every effort level some family takes."""


@attrs.frozen
class ReasoningFamily:
    """The reasoning settings a family of models takes."""

    name: str
    budget: bool = False
    """Takes a thinking budget in tokens (Anthropic's extended thinking)."""
    adaptive: bool = False
    """Takes adaptive thinking (the model decides how much to think)."""
    efforts: tuple[str, ...] = ()
    """The effort levels it takes (OpenAI's reasoning effort; Anthropic's output effort)."""

    @property
    def reasons(self) -> bool:
        return self.budget or self.adaptive or bool(self.efforts)


_CLAUDE_46 = ReasoningFamily(
    "Claude 4.6", budget=True, adaptive=True, efforts=("low", "medium", "high", "max")
)
_O_SERIES = ReasoningFamily("OpenAI o-series", efforts=("low", "medium", "high"))
_NONE = ReasoningFamily("no reasoning")

# the first matching prefix wins: longer prefixes first
_FAMILIES: tuple[tuple[str, ReasoningFamily], ...] = (
    ("claude-opus-4-6", _CLAUDE_46),
    ("claude-sonnet-4-6", _CLAUDE_46),
    (
        "claude-opus-4-5",
        ReasoningFamily("Claude Opus 4.5", budget=True, efforts=("low", "medium", "high")),
    ),
    ("claude-3-7", ReasoningFamily("Claude 3.7", budget=True)),
    ("claude-3", _NONE),
    ("claude-", ReasoningFamily("Claude 4", budget=True)),
    ("gpt-5-chat", _NONE),
    ("gpt-5-pro", ReasoningFamily("GPT-5 pro", efforts=("high",))),
    ("gpt-5.1", ReasoningFamily("GPT-5.1", efforts=("none", "low", "medium", "high"))),
    ("gpt-5", ReasoningFamily("GPT-5", efforts=("minimal", "low", "medium", "high"))),
    ("o1-mini", _NONE),
    ("o1", _O_SERIES),
    ("o3", _O_SERIES),
    ("o4-mini", _O_SERIES),
    ("gpt-4", _NONE),
    ("gpt-3.5", _NONE),
    ("chatgpt-4o", _NONE),
)


_BEDROCK_PREFIX = re.compile(r"(?:[a-z]+\.)?anthropic\.")
"""Bedrock's prefix of a Claude model id: ``anthropic.`` or a region's ``us.anthropic.``."""


@functools.lru_cache(maxsize=256)
def family_of(model: str) -> ReasoningFamily | None:
    """The family of ``model`` (a model id, with or without a date), None when unknown
    (found once per model id and process: a request asks for it every turn)."""
    bedrock = _BEDROCK_PREFIX.match(model)
    if bedrock is not None:
        model = model[bedrock.end() :]
    for prefix, family in _FAMILIES:
        if model.startswith(prefix):
            return family
    return None
