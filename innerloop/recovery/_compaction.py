"""Compaction: shrink the oldest history while keeping it valid for every provider.

``plan_cut`` is the pure planning step shared by every compactor: it picks where the kept
history starts. The rules that keep a compacted history valid:

- a cut lands only on a user message, so the kept history starts with ``user`` and
  alternation survives;
- tool results whose tool call was cut away turn into plain text, so no tool_result is
  orphaned and no kept tool_use loses its result;
- the newest ``keep_recent`` messages (at least two) and the latest assistant turn are
  kept verbatim, thinking blocks and signatures included (Anthropic requires the latest
  assistant turn's thinking while a tool loop is in progress);
- a marker (and, for :class:`SummarizingCompactor`, a summary) opens the first kept user
  message, each as its own text block;
- the task (the blocks of the history's first user message, up to the marker of any earlier
  compaction) is never dropped: it opens the first kept message, before the marker. Only
  ``keep_task=False``, the user's own choice, lets it go.

The planner counts the compacted history exactly, so a compactor meets its target
whenever some allowed cut does.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

import attrs

from innerloop._errors import InnerloopError
from innerloop._messages import (
    Block,
    DocumentBlock,
    ImageBlock,
    Message,
    ModelResponse,
    RedactedThinkingBlock,
    ServerToolBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)
from innerloop.providers._base import final_response
from innerloop.providers._normalize import RequestSettings, build_request
from innerloop.recovery._tokens import (
    MESSAGE_OVERHEAD,
    MessageTokenCache,
    TokenCounter,
    count_message,
)

if TYPE_CHECKING:
    from innerloop.providers._base import Provider

__all__ = [
    "SUMMARY_INSTRUCTIONS",
    "CompactionRequest",
    "CompactionResult",
    "Compactor",
    "SummarizerError",
    "SummarizingCompactor",
    "TruncatingCompactor",
    "apply_cut",
    "marker_text",
    "plan_cut",
    "render_transcript",
    "task_blocks",
]

MIN_KEEP = 2
SUMMARY_HEADER = "Summary of the removed part:\n"
ELLIPSIS = " [...]"
SUMMARY_INSTRUCTIONS = (
    "You compact the early part of a conversation between a user and an AI assistant "
    "that uses tools, so the assistant can carry on without it. Write a concise summary "
    "of the transcript you are given: the user's goals and instructions, decisions made, "
    "facts learned from tool results (names, numbers, paths, identifiers), work done and "
    "work still open. Write plain prose or short bullet points; no preamble."
)


@attrs.frozen
class CompactionRequest:
    history: tuple[Message, ...]
    target_tokens: int
    """What the history (not counting system prompt and tools) should fit in."""
    reason: str
    """``budget``, ``max_tokens`` or ``overflow``."""
    keep_recent: int = 4


@attrs.frozen
class CompactionResult:
    history: tuple[Message, ...]
    removed: int
    """Messages removed from the front (0: nothing could be removed)."""
    summary: str | None = None
    usage: Usage = Usage()
    """What a model-based compactor spent (booked on the run's spend)."""
    model: str = ""
    """The model that spent ``usage`` (for its price)."""


class Compactor(Protocol):
    async def compact(
        self, request: CompactionRequest, tokens: MessageTokenCache
    ) -> CompactionResult: ...


class SummarizerError(InnerloopError):
    """The summarizing model gave no usable summary (the fallback compactor takes over)."""


def _orphans_to_text(message: Message) -> Message:
    """Tool results whose call was compacted away become text, keeping their content."""
    if not message.tool_results:
        return message
    blocks: list[Block] = []
    for block in message.content:
        if isinstance(block, ToolResultBlock):
            status = "error" if block.is_error else "result"
            blocks.append(TextBlock(f"[{status} of a compacted tool call]: {block.content}"))
        else:
            blocks.append(block)
    return Message("user", tuple(blocks))


MARKER_PREFIX = "[Earlier conversation compacted"


def marker_text(removed: int, reason: str) -> str:
    return f"{MARKER_PREFIX} ({reason}): {removed} messages removed.]"


def task_blocks(history: Sequence[Message]) -> tuple[Block, ...]:
    """The task: the blocks of the history's first message when it is the user's, up to
    the marker an earlier compaction put after them (none when it opens with another
    role)."""
    if not history or history[0].role != "user":
        return ()
    blocks = history[0].content
    for i, block in enumerate(blocks):
        if isinstance(block, TextBlock) and block.text.startswith(MARKER_PREFIX):
            return blocks[:i]
    return blocks


def _head(
    history: Sequence[Message],
    cut: int,
    marker: str,
    summary: str | None,
    keep_task: bool = True,
) -> Message:
    first = _orphans_to_text(history[cut])
    lead = (*(task_blocks(history) if keep_task else ()), TextBlock(marker))
    if summary:
        lead += (TextBlock(SUMMARY_HEADER + summary),)
    return Message("user", (*lead, *first.content))


def apply_cut(
    history: Sequence[Message],
    cut: int,
    marker: str,
    summary: str | None = None,
    *,
    keep_task: bool = True,
) -> tuple[Message, ...]:
    """History from ``cut`` on, with the task (see :func:`task_blocks`; dropped too with
    ``keep_task=False``), then ``marker`` (and ``summary``) opening the first kept (user)
    message."""
    return (_head(history, cut, marker, summary, keep_task), *history[cut + 1 :])


def _allowed_cuts(history: Sequence[Message], keep_recent: int, keep_task: bool) -> list[int]:
    """User-message indexes that leave the newest messages and the latest assistant turn
    untouched (the message at the cut itself receives the marker) and remove something
    (a cut at 1 that keeps the task removes nothing when the first message is all task)."""
    n = len(history)
    last = n - max(keep_recent, MIN_KEEP) - 1
    assistants = [i for i, m in enumerate(history) if m.role == "assistant"]
    if assistants:
        last = min(last, assistants[-1] - 1)
    first = 1
    if keep_task and history and len(task_blocks(history)) == len(history[0].content):
        first = 2
    return [c for c in range(first, last + 1) if history[c].role == "user"]


def plan_cut(
    history: Sequence[Message],
    target_tokens: int,
    tokens: MessageTokenCache,
    keep_recent: int = 4,
    *,
    reason: str = "budget",
    reserve: int = 0,
    keep_task: bool = True,
) -> int:
    """Index where the kept history starts; 0 means nothing can be removed.

    The smallest cut whose compacted history (task and marker included, plus ``reserve``
    tokens for a summary) fits ``target_tokens`` wins; when none fits, the largest allowed
    cut.
    """
    cuts = _allowed_cuts(history, keep_recent, keep_task)
    if not cuts:
        return 0
    counts = [tokens.count(m) for m in history]
    suffix = [0] * (len(history) + 1)
    for i in range(len(history) - 1, -1, -1):
        suffix[i] = suffix[i + 1] + counts[i]
    for cut in cuts:
        kept = suffix[cut + 1] + reserve
        if kept + MESSAGE_OVERHEAD > target_tokens:
            continue  # cannot fit whatever the first kept message costs
        head = _head(history, cut, marker_text(cut, reason), None, keep_task)
        if kept + count_message(tokens.counter, head) <= target_tokens:
            return cut
    return cuts[-1]


@attrs.frozen
class TruncatingCompactor:
    """Deterministic: drops the oldest messages behind a marker, the task kept (unless
    ``keep_task=False``). No model call."""

    keep_task: bool = True
    """Keep the task (the first user message) at the head of the kept history."""

    async def compact(
        self, request: CompactionRequest, tokens: MessageTokenCache
    ) -> CompactionResult:
        cut = plan_cut(
            request.history,
            request.target_tokens,
            tokens,
            request.keep_recent,
            reason=request.reason,
            keep_task=self.keep_task,
        )
        if cut == 0:
            return CompactionResult(request.history, 0)
        marker = marker_text(cut, request.reason)
        kept = apply_cut(request.history, cut, marker, keep_task=self.keep_task)
        return CompactionResult(kept, cut)


def _render_document(block: DocumentBlock, limit: int) -> str:
    name = f"{block.title!r} " if block.title else ""
    head = f"[document {name}({block.url or block.media_type})]"
    text = block.text
    if len(text) > limit:
        text = text[:limit] + ELLIPSIS
    return f"{head}: {text}" if text else head


def _render_block(block: Block, names: dict[str, str], limit: int) -> str | None:
    if isinstance(block, TextBlock):
        return block.text or None
    if isinstance(block, ToolUseBlock):
        names[block.id] = block.name
        args = json.dumps(block.input, separators=(",", ":"), ensure_ascii=False)
        return f"[calls tool {block.name} with {args}]"
    if isinstance(block, ToolResultBlock):
        content = block.content
        if len(content) > limit:
            content = content[:limit] + ELLIPSIS
        kind = "error" if block.is_error else "result"
        return f"[tool {kind} of {names.get(block.tool_use_id, 'a tool')}]: {content}"
    if isinstance(block, ImageBlock):
        return f"[image ({block.media_type or block.url})]"
    if isinstance(block, DocumentBlock):
        return _render_document(block, limit)
    if isinstance(block, ThinkingBlock | RedactedThinkingBlock):
        return None  # private reasoning; its conclusions are in the text that follows
    if isinstance(block, ServerToolBlock):
        data = {k: v for k, v in block.data.items() if k not in ("type", "id", "tool_use_id")}
        text = json.dumps(data, separators=(",", ":"), ensure_ascii=False, default=str)
        if len(text) > limit:
            text = text[:limit] + ELLIPSIS
        kind = "result" if block.is_result else "call"
        return f"[server tool {block.name} {kind}]: {text}"
    return None


def render_transcript(history: Sequence[Message], result_chars: int = 2000) -> str:
    """The history as plain text for a summarizer: roles, text, tool calls and results
    (each result cut to ``result_chars``); thinking is left out."""
    names: dict[str, str] = {}
    parts: list[str] = []
    for message in history:
        lines = [_render_block(b, names, result_chars) for b in message.content]
        body = "\n".join(line for line in lines if line)
        if body:
            parts.append(f"{message.role.upper()}:\n{body}")
    return "\n\n".join(parts)


def _trim_to_tokens(text: str, limit: int, counter: TokenCounter) -> str:
    """``SUMMARY_HEADER + result`` counts at most ``limit`` tokens; '' if nothing fits."""
    if counter.count_text(SUMMARY_HEADER + text) <= limit:
        return text
    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if counter.count_text(SUMMARY_HEADER + text[:mid] + ELLIPSIS) <= limit:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo].rstrip() + ELLIPSIS if lo else ""


def _fit_summary(
    text: str,
    reserve: int,
    history: Sequence[Message],
    cut: int,
    marker: str,
    counter: TokenCounter,
    keep_task: bool,
) -> str | None:
    """``text`` trimmed so the summary adds at most ``reserve`` tokens to the first kept
    message; None when nothing fits. Counted in its message, as the budget counts it: a
    text joined to the message's others can cost a token more than alone."""
    without = count_message(counter, _head(history, cut, marker, None, keep_task))
    limit = reserve
    while limit > 0:  # each miss lowers the limit by its overshoot (at least one token)
        summary = _trim_to_tokens(text, limit, counter)
        if not summary:
            return None
        head = _head(history, cut, marker, summary, keep_task)
        over = count_message(counter, head) - without - reserve
        if over <= 0:
            return summary
        limit -= over
    return None


@attrs.frozen
class SummarizingCompactor:
    """Model-based: the oldest part of the history becomes one summary, written by
    ``model`` on ``provider`` (any provider; typically a cheaper model than the run's).

    The cut is planned as for :class:`TruncatingCompactor`, with room kept for a summary of
    at most ``summary_tokens`` tokens (a quarter of the target at most). The summary opens
    the first kept user message, after the marker. Any failure of the summarizer raises,
    so the run's fallback compactor takes over. Its usage is booked on the run's spend.

    ``Harness(params, providers, compactor=SummarizingCompactor(haiku, "claude-haiku-4-5"))``
    where ``haiku`` is any :class:`~innerloop.providers.Provider` (it need not be one of
    the run's own).
    """

    provider: Provider
    model: str
    summary_tokens: int = 1024
    instructions: str = SUMMARY_INSTRUCTIONS
    result_chars: int = 2000
    """Tool results longer than this are cut in the transcript the summarizer reads."""
    keep_task: bool = True
    """Keep the task (the first user message) verbatim, before the marker and summary."""

    async def compact(
        self, request: CompactionRequest, tokens: MessageTokenCache
    ) -> CompactionResult:
        reserve = min(self.summary_tokens, request.target_tokens // 4)
        history = request.history
        cut = plan_cut(
            history,
            request.target_tokens,
            tokens,
            request.keep_recent,
            reason=request.reason,
            reserve=reserve,
            keep_task=self.keep_task,
        )
        if cut == 0:
            return CompactionResult(history, 0)
        response = await self.summarize(history[:cut])
        text = response.message.text.strip()
        if not text:
            raise SummarizerError(
                f"{self.provider.name}:{self.model} returned no summary text "
                f"(stop_reason {response.stop_reason!r})"
            )
        marker = marker_text(cut, request.reason)
        summary = _fit_summary(
            text, reserve, history, cut, marker, tokens.counter, self.keep_task
        )
        return CompactionResult(
            apply_cut(history, cut, marker, summary, keep_task=self.keep_task),
            cut,
            summary,
            response.usage,
            response.model or self.model,
        )

    async def summarize(self, part: Sequence[Message]) -> ModelResponse:
        """One streamed request to the summarizer; the assembled final response."""
        dialect = self.provider.dialect
        params = RequestSettings(self.summary_tokens, self.instructions)
        prompt = "<transcript>\n" + render_transcript(part, self.result_chars) + "\n</transcript>"
        request = build_request(params, (Message.user(prompt),), dialect, self.model)
        response = await final_response(await self.provider.open(request))
        if response is not None:
            return response
        raise SummarizerError(
            f"the stream from {self.provider.name}:{self.model} ended without a final message"
        )
