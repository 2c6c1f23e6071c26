"""``History``: a list of messages whose chain of links always holds exactly its
messages, whatever is done to it, so what is kept from one call to the next is never
taken for a history it was not made from."""

from __future__ import annotations

import copy
import pickle
import random
from collections.abc import Callable

from innerloop import Message
from innerloop._history import History, chain_of, extends, items_of, unshared
from innerloop.fsm import HarnessState

_messages_of = items_of


def _holds(history: History[Message]) -> None:
    head = chain_of(history)
    assert _messages_of(head) == list(history)
    assert all(a is b for a, b in zip(_messages_of(head), history, strict=True))


def test_every_change_keeps_the_chain_exact() -> None:
    """After each of 2,000 random list operations (appends, edits at either end and in the
    middle, slices, deletions, sorts...), the chain holds the history's own messages."""
    rng = random.Random(7)
    pool = [Message.user(f"m{i}") for i in range(40)]
    history: History[Message] = History()
    ops: list[Callable[[History[Message]], object]] = [
        lambda h: h.append(rng.choice(pool)),
        lambda h: h.extend(rng.sample(pool, 3)),
        lambda h: h.__iadd__([rng.choice(pool)]),
        lambda h: h.__setitem__(-1, rng.choice(pool)) if h else None,
        lambda h: h.__setitem__(len(h) - 1, rng.choice(pool)) if h else None,
        lambda h: h.__setitem__(rng.randrange(len(h)), rng.choice(pool)) if h else None,
        lambda h: h.__setitem__(slice(1, 3), rng.sample(pool, 4)),
        lambda h: h.pop() if h else None,
        lambda h: h.pop(0) if h else None,
        lambda h: h.__delitem__(slice(0, 2)),
        lambda h: h.insert(1, rng.choice(pool)),
        lambda h: h.remove(h[0]) if h else None,
        lambda h: h.reverse(),
        lambda h: h.sort(key=lambda m: m.text),
        lambda h: h.__imul__(1),
        lambda h: h.clear() if len(h) > 30 else None,
    ]
    for _ in range(2_000):
        op = rng.choice(ops)
        op(history)
        if rng.random() < 0.5:
            _holds(history)
    _holds(history)


def test_a_copy_shares_the_chain_and_goes_its_own_way() -> None:
    """``History(other)`` starts from ``other``'s chain; two copies that take different
    messages after it never extend each other's chain."""
    base = History([Message.user("a"), Message.assistant("b")])
    kept = chain_of(base)
    one, two = History(base), History(base)
    assert chain_of(one) is kept
    one.append(Message.user("c"))
    two.append(Message.user("c"))  # equal, not the same message
    assert extends(chain_of(one), kept)
    assert extends(chain_of(two), kept)
    assert not extends(chain_of(two), chain_of(one))
    assert not extends(kept, chain_of(one))  # a shorter chain never extends a longer one
    two[0] = Message.user("z")  # an edit in the middle: a new chain
    assert not extends(chain_of(two), kept)
    _holds(one)
    _holds(two)


def test_copies_and_pickles_are_histories() -> None:
    """A pickled or copied history is a ``History`` with the same messages and its own
    chain (made when first asked for)."""
    history = History([Message.user("a"), Message.assistant("b")])
    for other in (
        copy.copy(history),
        copy.deepcopy(history),
        pickle.loads(pickle.dumps(history)),
    ):
        assert type(other) is History
        assert other == history
        _holds(other)
        other.append(Message.user("c"))
        _holds(other)
    assert len(history) == 2


def test_a_plain_list_is_compared_with_the_last_one_seen() -> None:
    """A plain list's chain goes on from the last one seen that it begins with, and is
    made anew when a message before its end differs."""
    a, b, c = Message.user("a"), Message.assistant("b"), Message.user("c")
    first = chain_of([a, b])
    assert _messages_of(chain_of([a, b, c])) == [a, b, c]
    longer = chain_of([a, b, c])
    assert longer is not None
    assert longer.before is first
    other = chain_of([a, Message.assistant("b"), c])
    assert other is not None
    assert other.before is not first
    assert _messages_of(chain_of((a, b, c))) == [a, b, c]
    assert chain_of([]) is None


def test_a_long_chain_is_freed_without_recursion() -> None:
    """A chain of 200,000 links is freed (and its repr is short)."""
    history = History(Message.user("x") for _ in range(200_000))
    head = chain_of(history)
    assert repr(head) == "<Link 200000 items>"
    del history, head


def test_an_edit_far_back_makes_the_chain_anew() -> None:
    """In a history of 200 messages, an edit, insertion or removal far from the end (the
    chain made anew) or near it (cut back and made on) leaves the chain exact."""
    pool = [Message.user(f"m{i}") for i in range(200)]
    edits: list[Callable[[History[Message]], object]] = [
        lambda h: h.__setitem__(10, pool[0]),
        lambda h: h.__setitem__(190, pool[0]),
        lambda h: h.__setitem__(-3, pool[0]),
        lambda h: h.pop(0),
        lambda h: h.pop(-2),
        lambda h: h.insert(5, pool[1]),
        lambda h: h.insert(-1, pool[1]),
        lambda h: h.__delitem__(150),
        lambda h: h.__delitem__(-1),
    ]
    for edit in edits:
        history = History(pool)
        chain_of(history)
        edit(history)
        _holds(history)
        history.append(pool[2])
        _holds(history)


class _Holder:
    items: list[int]


def test_unshared_counts_who_holds_a_value() -> None:
    """A value read from the one attribute that holds it is unshared; with one more
    name or container holding it, it is not, unless the caller counts that holder.
    (Counted outside ``assert``: pytest's rewritten asserts hold what they read.)"""
    holder = _Holder()
    holder.items = [1]
    alone = unshared(holder.items)
    other = holder.items
    named, counted = unshared(holder.items), unshared(holder.items, 2)
    del other
    pair = (holder.items,)
    paired, both = unshared(holder.items), unshared(pair[0], 2)
    assert (alone, named, counted, paired, both) == (True, False, True, False, True)


def _handed_on() -> tuple[HarnessState, History[Message]]:
    """A state whose history list was handed on, and that list, added to since."""
    state = HarnessState(history=History([Message.user("a"), Message.assistant("b")]))
    handed = state._hand_on_history()
    handed.append(Message.user("c"))
    return state, handed


def test_a_state_whose_history_was_handed_on_reads_it_as_it_was() -> None:
    """After its list was handed on (to a conversation's next message), a state reads
    its history as it was, whatever reads it: the attribute, a copy, ``attrs.evolve``,
    a pickle, its JSON form, its repr; the list made again is a history whose chain goes
    on with it; a list something else holds is copied, not handed on."""
    import attrs

    from innerloop.durable._codec import state_to_dict

    def texts(messages: list[Message]) -> list[str]:
        return [m.text for m in messages]

    state, handed = _handed_on()
    assert type(state.history) is History
    assert texts(state.history) == ["a", "b"]
    assert extends(chain_of(handed), chain_of(state.history))
    assert texts(handed) == ["a", "b", "c"]
    assert texts(copy.deepcopy(_handed_on()[0]).history) == ["a", "b"]
    assert texts(attrs.evolve(_handed_on()[0]).history) == ["a", "b"]
    assert texts(pickle.loads(pickle.dumps(_handed_on()[0])).history) == ["a", "b"]
    assert [m["content"][0]["text"] for m in state_to_dict(_handed_on()[0])["history"]] == [
        "a",
        "b",
    ]
    assert "messages=2" in repr(_handed_on()[0])
    held = state.history
    copied = state._hand_on_history()
    assert copied is not held
    assert state.history is held
    assert copied == held
