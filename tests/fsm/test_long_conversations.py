"""Long conversations stay linear: nothing a run carries from message to message grows
per model call, no repr of run data renders the history, and a fake provider keeps a
bounded number of requests."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import pytest

from innerloop import Harness, HarnessParams, Message
from innerloop.checkpoint import open_checkpointer
from innerloop.fsm import HarnessState
from innerloop.testing import FakeProvider, ScriptedProvider, reply


def test_resolved_models_keep_each_model_once() -> None:
    """Fifty answers from one model record it once (not once per call)."""
    script = ScriptedProvider([reply(f"a{i}") for i in range(50)])
    harness = Harness(HarnessParams(model="scripted:m"), [script])
    session = harness.session()
    for i in range(50):
        state = session.send_sync(f"q{i}")
    assert state.resolved_models == ["m"]


def test_reprs_are_bounded() -> None:
    """The repr of a state, a run and a session of 10,000 messages is one short line."""
    history = [Message.user("x" * 100) for _ in range(10_000)]
    state = HarnessState(history=history)
    assert repr(state) == "<HarnessState running turns=0 messages=10000 tokens=0>"
    harness = Harness(HarnessParams(model="scripted:m"), [ScriptedProvider([reply("ok")])])
    run = harness.start(state=state)
    assert repr(run) == "<Run state='idle' turns=0>"
    session = harness.session("c1")
    assert len(repr(session)) < 80
    state.final_state, state.turns = "model_complete", 5000
    assert repr(state) == "<HarnessState model_complete turns=5000 messages=10000 tokens=0>"


def test_fake_provider_keeps_the_last_requests() -> None:
    """``requests`` keeps the last 100 by default, every one with ``keep_requests=None``,
    and refuses a negative bound."""
    for keep, expected in ((100, 100), (None, 150), (3, 3)):
        script = ScriptedProvider([reply(f"a{i}") for i in range(150)], keep_requests=keep)
        session = Harness(HarnessParams(model="scripted:m"), [script]).session()
        for i in range(150):
            session.send_sync(f"q{i}")
        assert len(script.requests) == expected
        assert len(script.requests[-1].payload["messages"]) == 299  # the latest kept
    with pytest.raises(ValueError, match="keep_requests must be 0 or more, or None, not -1"):
        FakeProvider(lambda r: reply("x"), keep_requests=-1)


def _bytes_per_message(tmp_path: Path, messages: int) -> float:
    store = open_checkpointer(f"sqlite:///{tmp_path / f'c{messages}.db'}")
    script = ScriptedProvider([reply(f"answer {i:05d}") for i in range(messages)], keep_requests=1)
    harness = Harness(
        HarnessParams(model="scripted:m"), [script], checkpointer=store, checkpoint_every="turn"
    )
    session = harness.session("long")
    with harness:
        for i in range(messages):
            session.send_sync(f"question {i:05d}")
    stored = store.stored_bytes()
    store.close()
    return stored / messages


def test_checkpoint_bytes_per_message_stay_flat(tmp_path: Path) -> None:
    """A conversation's checkpoint bytes per message at 100 and 1,000 messages: within
    1.2x (the 10,000-message measure is ``bench/longchat.py``'s)."""
    first, last = (_bytes_per_message(tmp_path, n) for n in (100, 1_000))
    assert last / first <= 1.2, (first, last)


def _fresh(history: list[Message]) -> list[Message]:
    """The same messages as new objects (nothing derived from them kept yet)."""
    return [Message(m.role, m.content) for m in history]


def test_a_conversations_call_hashes_only_its_new_messages(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Fingerprints and wire requests made as a conversation grows (a cache breakpoint
    on its last messages, consecutive user messages merged, a shortened history) are the
    ones made afresh; and a call after 300 messages serializes only what is new."""
    from innerloop.fsm import PromptCache
    from innerloop.fsm._context import request_settings
    from innerloop.providers import _fingerprint
    from innerloop.providers._fingerprint import history_fingerprint, request_digests
    from innerloop.providers._normalize import build_request

    settings = request_settings(
        HarnessParams(model="scripted:m", system="s", prompt_cache=PromptCache(last_messages=2))
    )
    history: list[Message] = []

    def both(messages: list[Message]) -> tuple[str, tuple[str, dict[str, str]], Any]:
        request = build_request(settings, messages, "anthropic", "m")
        return history_fingerprint(messages), request_digests(request), request.payload

    for i in range(100):
        history += [Message.user(f"q{i}"), Message.assistant(f"a{i}")]
        if i % 7 == 0:
            history.append(Message.user("and"))  # merged with the next user message
        for messages in (history, history[:1] + history[5:]):
            assert both(messages) == both(_fresh(messages)), i
    texts: list[Any] = []
    real = _fingerprint._text

    def counted(data: Any) -> str:
        texts.append(data)
        return real(data)

    monkeypatch.setattr(_fingerprint, "_text", counted)
    history.append(Message.user("one more"))
    both(history)
    assert len(texts) < 20, texts  # the new message, the breakpoints' copies, the keys


def test_an_ended_message_run_is_freed_at_once(tmp_path: Path) -> None:
    """A conversation's message run with checkpoints is freed when it ends, not left in a
    reference cycle (its scope held the checkpoint writer's hook bound to the run): each
    such run kept its whole history until the garbage collector's next pass, which then
    walked every one of them."""
    store = open_checkpointer(f"sqlite:///{tmp_path / 'c.db'}")
    script = ScriptedProvider([reply(f"a{i}") for i in range(5)])
    harness = Harness(
        HarnessParams(model="scripted:m"), [script], checkpointer=store, checkpoint_every="turn"
    )
    session = harness.session("c1")
    with harness:
        session.send_sync("q0")
        gc.collect()
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            for i in range(1, 5):
                session.send_sync(f"q{i}")
            gc.collect()
            kept = [type(o).__name__ for o in gc.garbage]
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
    store.close()
    assert not {"Run", "HarnessState", "PhaseContext"} & set(kept), kept


def _turn(i: int) -> list[Message]:
    """A user question, a tool call (with thinking and text), its result, an answer."""
    from innerloop import TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock

    call = ToolUseBlock(f"c{i}", "grep", {"q": i, "flag": i % 2 == 0})
    return [
        Message.user(f"q{i}"),
        Message.assistant([ThinkingBlock(f"t{i}", f"sig{i}"), TextBlock(f"a{i}"), call]),
        Message.user([ToolResultBlock(f"c{i}", f"r{i}", is_error=i % 3 == 0)]),
        Message.assistant(f"done {i}"),
    ]


@pytest.mark.parametrize("chained_from", [4, 256])
@pytest.mark.parametrize("dialect", ["anthropic", "openai", "responses"])
def test_requests_made_call_after_call_are_the_ones_made_whole(
    dialect: str, chained_from: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each dialect's wire request (its JSON bytes), its fingerprint and the history's
    fingerprint, made call after call as a conversation goes on (each message's history
    a copy of the last one's, as a session makes it; a plain list; consecutive user
    messages merged; a fork whose branches take turns; a compaction that rewrites the
    beginning; an edit in the middle; a host changing a request's messages after it was
    made), are those made from fresh messages; whether the history goes on by its chain
    of links from its fifth message on, or by comparison up to 256."""
    import json

    from innerloop.providers import _normalize

    monkeypatch.setattr(_normalize, "_CHAINED_FROM", chained_from)

    from innerloop._history import History
    from innerloop.fsm import PromptCache
    from innerloop.fsm._context import request_settings
    from innerloop.providers._fingerprint import history_fingerprint, request_digests
    from innerloop.providers._normalize import build_request

    settings = request_settings(
        HarnessParams(model="scripted:m", system="s", prompt_cache=PromptCache(last_messages=2))
    )

    calls = [0]

    def made(messages: list[Message]) -> tuple[bytes, tuple[str, dict[str, str]], str]:
        request = build_request(settings, messages, dialect, "m")
        wire = json.dumps(request.payload, ensure_ascii=False).encode()
        made = wire, request_digests(request), history_fingerprint(messages)
        calls[0] += 1
        sent = request.payload["input" if dialect == "responses" else "messages"]
        if calls[0] % 3 == 0:  # a host changes a request's messages after it was made
            sent.append({"role": "user", "content": "added"})
        elif calls[0] % 3 == 1 and len(sent) > 2:
            sent[1] = {"role": "user", "content": "replaced"}
        return made

    def same(messages: list[Message]) -> None:
        assert made(messages) == made(_fresh(messages)), len(messages)

    history: History[Message] = History()
    for i in range(30):
        history = History(history)  # the next message's run: a copy sharing the chain
        for message in _turn(i):
            history.append(message)
            same(history)
        if i % 5 == 0:  # a user message merged into the last one, as a session merges
            history.append(Message.user(f"and {i}"))
            history[-1] = Message("user", (*history[-1].content, *Message.user("x").content))
            same(history)
            same(list(history))  # a plain list of the same messages
    branches = [History(history), History(history)]  # a fork: two ways from one history
    for i in range(30, 36):
        for branch, turn in zip(branches, (_turn(i), _turn(i + 100)), strict=True):
            branch.extend(turn)
            same(branch)
    compacted = History([Message.user("summary"), *history[-8:]])  # a new beginning
    same(compacted)
    compacted.extend(_turn(50))
    same(compacted)
    history[3] = Message.user("edited")  # an edit in the middle of a history
    same(history)
    plain = list(history)
    plain[5] = Message.user("edited too")  # and of a plain list
    same(plain)
    same(plain + _turn(60))


@pytest.mark.parametrize(
    ("dialect", "part"),
    [("openai", "_openai_user_part"), ("responses", "_responses_user_part")],
)
def test_openai_calls_convert_only_new_messages(
    dialect: str, part: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Chat Completions or Responses call after 300 messages converts only the message
    added since the last call (as Anthropic's does), not the whole history."""
    from innerloop._history import History
    from innerloop.fsm._context import request_settings
    from innerloop.providers import _normalize
    from innerloop.providers._normalize import build_request

    settings = request_settings(HarnessParams(model="scripted:m", system="s"))
    history = History(m for i in range(75) for m in _turn(i))
    build_request(settings, history, dialect, "m")
    converted: list[object] = []
    real = getattr(_normalize, part)

    def counted(block: object) -> object:
        converted.append(block)
        return real(block)

    monkeypatch.setattr(_normalize, part, counted)
    history = History(history)
    history.append(Message.user("one more"))
    build_request(settings, history, dialect, "m")
    assert len(converted) == 1, converted


@pytest.mark.parametrize("dialect", ["anthropic", "openai", "responses"])
def test_a_long_historys_fingerprints_copy_nothing_of_it(dialect: str) -> None:
    """The fingerprints of a 20,000-message history and of its request, when they go on
    from the last ones made, allocate next to nothing: no copy of the history or of the
    request's messages is made to compare them with the last ones (each copy would be
    160 KB)."""
    import tracemalloc

    from innerloop._history import History
    from innerloop.fsm._context import request_settings
    from innerloop.providers._fingerprint import history_fingerprint, request_digests
    from innerloop.providers._normalize import build_request

    settings = request_settings(HarnessParams(model="scripted:m", system="s"))
    history = History(m for i in range(5_000) for m in _turn(i))
    history_fingerprint(history)
    request_digests(build_request(settings, history, dialect, "m"))
    history = History(history)
    history.append(Message.user("next"))
    request = build_request(settings, history, dialect, "m")
    tracemalloc.start()
    try:
        history_fingerprint(history)
        request_digests(request)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20_000, peak


def test_a_message_goes_on_with_the_last_ones_history_list() -> None:
    """A conversation's next message goes on with the last message's history list itself
    (no copy of the conversation per message) when nothing else holds it: the earlier
    state still reads its history as it was (made again when read, once); a list the
    host holds is copied instead, and stays as it was."""
    from innerloop._history import History

    script = ScriptedProvider([reply(f"a{i}") for i in range(4)], keep_requests=0)
    session = Harness(HarnessParams(model="scripted:m"), [script]).session()
    first = session.send_sync("q0")
    handed = id(first.history)
    second = session.send_sync("q1")
    assert id(second.history) == handed  # `first` lives: its list's id is not reused
    assert [m.text for m in first.history] == ["q0", "a0"]
    assert type(first.history) is History
    assert first.history is first.history
    assert [m.text for m in second.history] == ["q0", "a0", "q1", "a1"]
    first.history.append(Message.user("mine"))  # the earlier state's list is its own
    held = second.history
    third = session.send_sync("q2")
    assert third.history is not held
    assert len(held) == 4
    assert [m.text for m in third.history][-2:] == ["q2", "a2"]
    assert [m.text for m in session.send_sync("q3").history][:4] == ["q0", "a0", "q1", "a1"]


def test_run_started_makes_its_messages_when_read() -> None:
    """A conversation's ``run_started`` keeps no copy of the history until its
    ``messages`` are read; read after the run went on, they are the history it started
    from, in the event's JSON form too."""
    from innerloop.events import RunStarted

    script = ScriptedProvider([reply(f"a{i}") for i in range(2)], keep_requests=0)
    session = Harness(HarnessParams(model="scripted:m"), [script]).session()
    session.send_sync("q0")
    run = session.start("q1")
    started = next(e for e in list(run.iter_sync()) if isinstance(e, RunStarted))
    assert run.state.exit_reason == "model_complete"
    assert len(run.state.history) == 4
    with pytest.raises(AttributeError):
        object.__getattribute__(started, "messages")  # not made yet
    assert [m.text for m in started.messages] == ["q0", "a0", "q1"]
    assert started.messages is started.messages
    assert len(started.to_dict()["messages"]) == 3
    with pytest.raises(AttributeError, match="'RunStarted' object has no attribute 'nope'"):
        _ = started.nope  # type: ignore[attr-defined]


def test_a_request_goes_on_with_the_last_requests_list_when_it_is_gone() -> None:
    """A request's wire messages go on with the last request's list itself once that
    request is gone (no 20,000-item copy per call); while a host still holds the last
    request, its messages are copied and stay as they were."""
    import tracemalloc

    from innerloop._history import History
    from innerloop.fsm._context import request_settings
    from innerloop.providers._normalize import build_request

    settings = request_settings(HarnessParams(model="scripted:m", system="s"))
    history = History(m for i in range(5_000) for m in _turn(i))
    kept = build_request(settings, history, "anthropic", "m")
    history.append(Message.user("next"))
    request = build_request(settings, history, "anthropic", "m")
    assert len(kept.payload["messages"]) == 20_000  # held: not grown
    assert len(request.payload["messages"]) == 20_001
    del kept, request
    history.append(Message.assistant("answer"))
    tracemalloc.start()
    try:
        request = build_request(settings, history, "anthropic", "m")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(request.payload["messages"]) == 20_002
    assert peak < 20_000, peak  # a copy of the list would be 160 KB


def test_a_long_conversations_message_copies_nothing_of_it(tmp_path: Path) -> None:
    """One message of a 5,000-message conversation (events read, SQLite checkpoints at
    each turn) allocates less at its peak than one list of its history: the session's
    next history, the request's messages and ``run_started.messages`` are no copies."""
    import tracemalloc

    store = open_checkpointer(f"sqlite:///{tmp_path / 'c.db'}")
    script = ScriptedProvider([reply(f"a{i}") for i in range(2_501)], keep_requests=0)
    harness = Harness(
        HarnessParams(model="scripted:m"), [script], checkpointer=store, checkpoint_every="turn"
    )
    session = harness.session("long")
    with harness:
        for i in range(2_500):
            session.send_sync(f"q{i}")
        tracemalloc.start()
        try:
            state = session.send_sync("one more")
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    store.close()
    assert len(state.history) == 5_002
    assert peak < 5_000 * 8, peak  # one list of 5,000 messages: 40 KB
