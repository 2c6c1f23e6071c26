"""Exact request counts from a provider's count-tokens endpoint, when the host wants them.

Local counting (tiktoken ``cl100k_base``) is an estimate for Claude models. A counter that
also implements :class:`RequestTokenCounter` lets the ``assemble`` phase ask for the exact
size of each whole request; the per-message local counts still plan compaction, and any
failure of the endpoint falls back to the local count.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from innerloop.providers._normalize import WireRequest
from innerloop.recovery._tokens import RequestTokenCounter, TiktokenCounter, TokenCounter

if TYPE_CHECKING:
    from anthropic import AsyncAnthropic

__all__ = ["AnthropicTokenCounter", "RequestTokenCounter"]

COUNTED_FIELDS = ("model", "messages", "system", "tools", "tool_choice", "thinking")
"""The parts of a Messages request the count-tokens endpoint accepts."""


class AnthropicTokenCounter:
    """Exact input-token counts from Anthropic's count-tokens endpoint.

    ``client`` is an ``anthropic.AsyncAnthropic`` (build it with ``max_retries=0``: a failed
    count falls back to the local count rather than retrying). Texts are counted locally by
    ``local`` (tiktoken by default), for the per-message cache and compaction planning.
    """

    def __init__(self, client: AsyncAnthropic, local: TokenCounter | None = None) -> None:
        self.client = client
        self.local = local if local is not None else TiktokenCounter()
        self.failures: list[str] = []
        """Why each failed count fell back to the local count."""

    def count_text(self, text: str) -> int:
        return self.local.count_text(text)

    async def count_request(self, request: WireRequest) -> int | None:
        if request.dialect != "anthropic":
            return None
        import anthropic

        body: dict[str, Any] = {
            k: request.payload[k] for k in COUNTED_FIELDS if k in request.payload
        }
        try:
            result = await self.client.messages.count_tokens(**body)
        except anthropic.APIError as exc:
            self.failures.append(f"{type(exc).__name__}: {exc}")
            return None
        return int(result.input_tokens)

    def __repr__(self) -> str:
        return f"AnthropicTokenCounter(local={self.local!r})"
