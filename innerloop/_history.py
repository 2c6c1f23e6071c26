"""A history that knows what it holds without being compared.

What is derived from a conversation's history (its wire messages, its fingerprint) is
kept from call to call and goes on with the messages added since. To go on, a call must
know the history still begins with the messages the kept part was made from. Comparing
them one by one costs the whole history at every call; a long conversation's calls then
grow with it.

A :class:`History` is a list that also keeps its messages as a chain of links, each link
the last message and the link of the messages before it, made on over the messages
appended when it is asked for; replacing one of the last messages cuts the chain back to
before it, and a copy (``History(other)``) shares the chain. Links never change, so a
link stands for exactly the messages up to it: what was made from a history is kept with
its last link, and a later history goes on from it when walking back from its own last
link by the messages added since meets that link (:func:`extends`). Any other change to
a history (an edit far from its end, a sort) drops its chain, which is made anew the
next time it is asked for. A request's wire messages are kept as a history too (of wire
messages), so its fingerprint goes on from the last request's the same way.

Any other sequence of messages (a plain list, a tuple) gets its chain by comparison with
the last one seen that began with the same message (:func:`chain_of`), as before.

What a message would otherwise copy of the conversation, it takes over when nothing else
holds it (:func:`unshared`): the next message's history is the last one's list (the
earlier state reads its history again from the chain), a request's wire messages the last
request's list once that request is gone; and ``run_started.messages`` is made from the
chain when read (:func:`tuple_later`).
"""

from __future__ import annotations

import operator
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Generic, SupportsIndex, TypeVar, final, overload

from innerloop._messages import Message

__all__ = [
    "History",
    "Link",
    "chain_of",
    "extends",
    "items_of",
    "link_at",
    "tuple_later",
    "unshared",
]

T = TypeVar("T")
_TAIL = 64
"""An edit this near the end of a history's linked messages cuts its chain back to
before it (made on from there when asked); one further back drops the chain."""


@final
class Link(Generic[T]):
    """An item on a chain (a message, or a wire message): ``before`` is the link of the
    items before it (None for the first) and ``size`` how many items the chain holds up
    to here. Never changed; compared by identity (a link stands for its items)."""

    __slots__ = ("before", "item", "size")

    def __init__(self, before: Link[T] | None, item: T) -> None:
        self.before = before
        self.item = item
        self.size: int = 1 if before is None else before.size + 1

    def __repr__(self) -> str:
        return f"<Link {self.size} items>"


def _chain(items: Iterable[T], head: Link[T] | None = None) -> Link[T] | None:
    for item in items:
        head = Link(head, item)
    return head


def _back(head: Link[T] | None, steps: int) -> Link[T] | None:
    for _ in range(steps):
        assert head is not None
        head = head.before
    return head


def items_of(head: Link[T] | None) -> list[T]:
    """The items of the chain ending at ``head``, first to last (a walk back over all of
    them)."""
    items: list[T] = []
    while head is not None:
        items.append(head.item)
        head = head.before
    items.reverse()
    return items


def tuple_later(items: Sequence[T]) -> Callable[[], tuple[T, ...]] | None:
    """What makes a tuple of ``items`` as they are now when called later, after they may
    have changed: for a :class:`History`, from the link of its last item (its chain made
    on now, over the items added since it was last made); None for another sequence (to be
    copied now)."""
    if type(items) is not History:
        return None
    head = items.head()
    return lambda: tuple(items_of(head))


def _references(item: object) -> int:
    return sys.getrefcount(item)


def _lone(item: object) -> int:
    return _references(item)  # as unshared counts: through one call with it as argument


_ALONE = _lone([[]][0])
"""What :func:`unshared` counts of a value nothing holds but the read passing it."""


def unshared(item: object, holders: int = 1) -> bool:
    """Whether nothing holds ``item`` but the ``holders`` its caller knows of (an object's
    attribute, a list's item), passed as read from one of them (``unshared(state.history)``,
    not a local name): then the caller may take it over (append to it, hand it on) where
    it would otherwise copy it, and nobody can see the difference. The count is the
    interpreter's own reference count: any reference more (a host's name, a debugger's
    frame, pytest's rewritten ``assert``) only makes the caller copy."""
    return _references(item) - _ALONE <= holders


def link_at(head: Link[T] | None, size: int) -> Link[T] | None:
    """The link of the first ``size`` items of the chain ending at ``head`` (a walk back
    over the items after them)."""
    if head is None:
        return None
    return _back(head, head.size - size)


def extends(head: Link[Any] | None, kept: Link[Any] | None) -> bool:
    """Whether the chain ending at ``head`` begins with the chain ending at ``kept``: a
    walk back over the links added since, not a comparison of the messages."""
    if kept is None:
        return True
    if head is None or head.size < kept.size:
        return False
    return _back(head, head.size - kept.size) is kept


@final
class History(list[T]):
    """A run's history: a ``list`` of messages (or of wire messages) that keeps the chain
    of :class:`Link`\\ s of its first items (see the module), made on to its end when
    asked for (:meth:`head`). Appending costs nothing more than a list's append; a copy
    shares the chain; an edit, an insertion or a removal among the last 64 linked items
    cuts the chain back to before it; any other change drops it (made anew when next
    asked for). A copy or a pickle of it is a plain history, its chain made when first
    needed."""

    __slots__ = ("_head", "_linked")

    def __init__(self, items: Iterable[T] = (), /) -> None:
        list.__init__(self, items)
        self._head: Link[T] | None = None
        self._linked = 0
        """How many items the chain ending at ``_head`` holds (-1: none known)."""
        if type(items) is History and items._linked >= 0 and len(items) == len(self):
            self._head, self._linked = items._head, items._linked

    @classmethod
    def made(cls, items: Sequence[T], head: Link[T] | None) -> History[T]:
        """A history of ``items``, the first of which make the chain ending at ``head``
        (the caller knows it is theirs)."""
        made = cls.__new__(cls)
        list.__init__(made, items)
        made._head, made._linked = head, 0 if head is None else head.size
        return made

    def __reduce__(self) -> tuple[Any, ...]:
        return (History, (list(self),))

    def knows(self) -> bool:
        """Whether the chain is at hand (no edit dropped it since it was last made)."""
        return self._linked >= 0

    def head(self) -> Link[T] | None:
        """The link of the last item (None for an empty history): the chain made on over
        the items added since it was last asked for (all of them after an edit dropped
        it)."""
        linked = self._linked
        if linked < 0:
            self._head, linked = None, 0
        if linked < len(self):
            self._head = _chain(self[linked:], self._head)
            self._linked = len(self)
        elif linked == 0:
            self._linked = 0
        return self._head

    def _cut(self, index: Any) -> None:
        """An item at ``index`` (an int) changed or moved: the chain is cut back to the
        links before it (or dropped, when that is far back)."""
        linked = self._linked
        if linked <= 0:
            return
        at = index.__index__()
        at = max(at + len(self), 0) if at < 0 else at
        if at >= linked:
            return
        if linked - at > _TAIL:
            self._head, self._linked = None, -1
        else:
            self._head, self._linked = _back(self._head, linked - at), at

    def _forget(self) -> None:
        self._head, self._linked = None, -1

    @overload
    def __setitem__(self, index: SupportsIndex, value: T, /) -> None: ...

    @overload
    def __setitem__(self, index: slice, value: Iterable[T], /) -> None: ...

    def __setitem__(self, index: Any, value: Any, /) -> None:
        if isinstance(index, slice):
            list.__setitem__(self, index, value)
            self._forget()
            return
        self._cut(index)  # before: a negative index counts from the end as it is now
        list.__setitem__(self, index, value)

    def pop(self, index: SupportsIndex = -1, /) -> T:
        self._cut(index)
        return list.pop(self, index)

    def __delitem__(self, index: SupportsIndex | slice, /) -> None:
        if isinstance(index, slice):
            list.__delitem__(self, index)
            self._forget()
            return
        self._cut(index)
        list.__delitem__(self, index)

    def insert(self, index: SupportsIndex, item: T, /) -> None:
        self._cut(index)
        list.insert(self, index, item)

    def remove(self, item: T, /) -> None:
        list.remove(self, item)
        self._forget()

    def clear(self) -> None:
        list.clear(self)
        self._head, self._linked = None, 0

    def sort(self, *args: Any, **kwargs: Any) -> None:
        list.sort(self, *args, **kwargs)
        self._forget()

    def reverse(self) -> None:
        list.reverse(self)
        self._forget()

    def __imul__(self, count: SupportsIndex, /) -> History[T]:
        list.__imul__(self, count)
        self._forget()
        return self


def chain_of(messages: Sequence[Message]) -> Link[Message] | None:
    """The link of the last of ``messages``: a :class:`History`'s own; for another
    sequence, made on the one kept from the last sequence seen that began with the same
    message, when this one begins with the same messages (the same objects: an equal
    message may not be sent alike, ``1`` and ``True`` are equal), else made anew."""
    if type(messages) is History:
        return messages.head()
    if not messages:
        return None
    memo = messages[0]._memo
    kept: Sequence[Message]
    head: Link[Message] | None
    kept, head = memo.get("chain", ((), None))
    n = len(kept)
    if n and not (n <= len(messages) and all(map(operator.is_, messages[:n], kept))):
        kept, head, n = (), None, 0
    if n < len(messages):
        head = _chain(messages[n:], head)
        memo["chain"] = (list(messages), head)
    assert head is not None
    return head
