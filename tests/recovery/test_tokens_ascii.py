"""TiktokenCounter's own split of ASCII text counts exactly what tiktoken counts."""

from __future__ import annotations

import contextlib
import gzip
import itertools
import json
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import example, given, settings
from hypothesis import strategies as st

from innerloop.recovery import TiktokenCounter
from innerloop.recovery._tokens import REMEMBERED_PIECES

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _words(text: str) -> list[str]:
    return text.split()


WHITESPACE = [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", "\r", "\x0b", "\x0c", "\x1c", "\x00"]
ATOMS = [
    *WHITESPACE,
    *[" \n", "\n ", "  \n  ", "\t\n", "\r\n\r\n", " \r\n"],
    *_words("'s 'S 't 'T 'd 'm 'll 'LL 'Ll 've 'VE 're 'Re ' '' 'x 'sx 'lla"),
    *_words("0 7 12 123 1234 12345678901 3.14 1,000"),
    *_words('! ? ... { } {" ": "," [] == === -> // # _ __init__ \\n \\u00e9 @@ | ~'),
    *_words("<|endoftext|> <|fim_prefix|> a Z hello World HTTP camelCase snake_case"),
    *["x" * 40, "q" * 7, "antidisestablishmentarianism", "zzzzzzzzzzqj"],
]
"""Pieces the split treats specially: whitespace runs, contractions, digit runs,
punctuation, special-token strings, long and rare words."""

ascii_text = st.lists(
    st.one_of(st.sampled_from(ATOMS), st.text(st.characters(max_codepoint=127), max_size=8)),
    max_size=24,
).map("".join)


@cache
def counter() -> TiktokenCounter:
    return TiktokenCounter()


def reference(text: str) -> int:
    return len(counter().encoding.encode_ordinary(text))


def _strings(value: Any) -> Iterator[str]:
    """Every string in a parsed JSON or YAML value, and the compact JSON of every object
    and array in it (what a tool input is counted as)."""
    if isinstance(value, bytes):  # a gzip body kept as YAML !!binary
        yield from _strings(gzip.decompress(value).decode(errors="replace"))
    elif isinstance(value, str):
        yield value
        if value[:1] in "{[":  # a JSON body kept as text: its strings too
            with contextlib.suppress(ValueError):
                yield from _strings(json.loads(value))
    elif isinstance(value, dict | list):
        yield json.dumps(value, separators=(",", ":"), default=repr)
        for item in value.values() if isinstance(value, dict) else value:
            yield from _strings(item)
            if isinstance(value, dict):
                yield from _strings(next(iter(value)))


def _sse_data(text: str) -> Iterator[Any]:
    for line in text.splitlines():
        if line.startswith("data:"):
            with contextlib.suppress(ValueError):
                yield json.loads(line[5:])


@cache
def fixture_texts() -> list[str]:
    """The texts of the repository's fixtures (the recorded provider traffic included):
    each file's text, and every string and tool input in it, ASCII as recorded and with
    its other characters dropped."""
    texts: list[str] = []
    for path in sorted(FIXTURES.rglob("*")):
        if not path.is_file():
            continue
        raw = path.read_text(errors="replace")
        found = [raw]
        if path.suffix in (".yaml", ".yml"):
            with contextlib.suppress(yaml.YAMLError):
                found += _strings(yaml.safe_load(raw))
        elif path.suffix in (".json", ".jsonl"):
            for line in raw.splitlines() if path.suffix == ".jsonl" else [raw]:
                with contextlib.suppress(ValueError):
                    found += _strings(json.loads(line))
        for text in list(found):
            found += _strings(list(_sse_data(text)))
        texts += found
    ascii = [t.encode("ascii", "ignore").decode() for t in texts]
    return sorted({t for t in texts + ascii if t and t.isascii()})


class TestAsciiSplit:
    @given(ascii_text)
    @settings(max_examples=3000)
    @example("it's DON'T   \r\n x  \n")
    @example("a \n\n  b  ")
    @example("x  \n")
    @example("   ")
    @example("123456 7 '' 'll")
    def test_counts_as_tiktoken_does(self, text: str) -> None:
        """Any ASCII text: the count is len(encode_ordinary(text))."""
        assert counter().count_text(text) == reference(text)

    def test_every_short_text_of_the_telling_characters(self) -> None:
        """Every text of up to four (five) of the characters that tell the pattern's
        alternatives apart (letters, a contraction's letters, a digit, quote, punctuation,
        each kind of whitespace) counts as tiktoken does."""
        for chars, longest in (("aZsL0'!{ \t\n\r\x0b\x0c\x1c", 4), ("aS0'! \t\n\r\x0b", 5)):
            for n in range(1, longest + 1):
                for chosen in itertools.product(chars, repeat=n):
                    text = "".join(chosen)
                    assert counter().count_text(text) == reference(text), repr(text)

    def test_the_recorded_traffic_and_fixtures(self) -> None:
        """Every text of the fixtures and the recorded provider traffic (bodies, message
        texts, tool inputs as compact JSON) counts as tiktoken does."""
        texts = fixture_texts()
        assert len(texts) > 1000
        wrong = [t for t in texts if counter().count_text(t) != reference(t)]
        assert wrong == []

    def test_non_ascii_text_is_counted_by_tiktoken(self) -> None:
        """Text with any non-ASCII character goes to tiktoken."""
        for text in ("café au lait", "日本語 text", "naïve 's", "emoji 🎉 ok"):
            assert counter().count_text(text) == reference(text)

    def test_the_piece_table_is_bounded(self) -> None:
        """The remembered piece counts are dropped when the table is full, and the counts
        stay exact."""
        mine = TiktokenCounter()
        table = mine._pieces
        assert table is not None
        words = [f"w{i}x" for i in range(REMEMBERED_PIECES + 10)]
        for word in words:
            mine.count_text(word)
        assert len(table) <= REMEMBERED_PIECES
        assert mine.count_text(" ".join(words[:50])) == reference(" ".join(words[:50]))


@pytest.mark.parametrize("text", ["", "a", " ", "\n"])
def test_tiny_texts(text: str) -> None:
    """The empty text and single characters count as tiktoken does."""
    assert counter().count_text(text) == reference(text)


def test_without_tiktokens_tables_every_text_goes_to_tiktoken(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The ASCII split rests on two names tiktoken does not promise (its ranks table and
    its one-piece encoder): an encoding without them is used through encode_ordinary
    alone, with the same counts."""
    from innerloop.recovery import _tokens

    split = TiktokenCounter()
    encoding = split.encoding

    class PublicOnly:
        encode_ordinary = staticmethod(encoding.encode_ordinary)

    monkeypatch.setattr(_tokens, "load_cl100k", lambda data_path=None: PublicOnly())
    plain = TiktokenCounter()
    texts = ["hello world", "x = {'a': 1}\n\n  ", "", "naïve café"]
    assert [plain.count_text(t) for t in texts] == [reference(t) for t in texts]
    assert plain._pieces is None  # nothing goes through the split
    assert split.count_text("hello world") == reference("hello world")
    assert split._pieces is not None
    assert set(split._pieces) == {"hello", " world"}
