"""A history that knows what it holds without being compared.

What is derived from a conversation's history (its wire messages, its fingerprint) is
kept from call to call and goes on with the messages added since. To go on, a call must
know the history still begins with the messages the kept part was made from. Comparing
them one by one costs the whole history at every call; a long conversation's calls then
grow with it.

A :class:`History` is a list that also keeps its messages as a chain of links, each link
the last message and the link of the messages before it: appending (or replacing the last
message, or dropping it) makes one link, and a copy (``History(other)``) shares the
chain. Links never change, so a link stands for exactly the messages up to it: what was
made from a history is kept with its last link, and a later history goes on from it when
walking back from its own last link by the messages added since meets that link
(:func:`extends`). Any other change to a history (an edit in its middle, an insertion,
a sort) drops its chain, which is made anew the next time it is asked for.

Any other sequence of messages (a plain list, a tuple) gets its chain by comparison with
the last one seen that began with the same message (:func:`chain_of`), as before.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence
from typing import Any, SupportsIndex, final, overload

from innerloop._messages import Message

__all__ = ["History", "Link", "chain_of", "extends"]


@final
class Link:
    """A message on a chain: ``before`` is the link of the messages before it (None for
    the first) and ``size`` how many messages the chain holds up to here. Never changed;
    compared by identity (a link stands for its messages)."""

    __slots__ = ("before", "message", "size")

    def __init__(self, before: Link | None, message: Message) -> None:
        self.before = before
        self.message = message
        self.size: int = 1 if before is None else before.size + 1

    def __repr__(self) -> str:
        return f"<Link {self.size} messages>"


def _chain(messages: Iterable[Message], head: Link | None = None) -> Link | None:
    for message in messages:
        head = Link(head, message)
    return head


def extends(head: Link | None, kept: Link | None) -> bool:
    """Whether the chain ending at ``head`` begins with the chain ending at ``kept``: a
    walk back over the links added since, not a comparison of the messages."""
    if kept is None:
        return True
    if head is None or head.size < kept.size:
        return False
    for _ in range(head.size - kept.size):
        head = head.before
        assert head is not None
    return head is kept


@final
class History(list[Message]):
    """A run's history: a ``list`` of messages that keeps its chain of :class:`Link`\\ s
    (see the module). Appending, replacing or dropping the last message and copying cost
    one link or none; any other change drops the chain (made anew when next asked for).
    A copy or a pickle of it is a plain history, its chain made when first needed."""

    __slots__ = ("_head", "_known")

    def __init__(self, messages: Iterable[Message] = (), /) -> None:
        super().__init__(messages)
        self._head: Link | None = None
        self._known = not self
        if type(messages) is History and messages._known and len(messages) == len(self):
            self._head, self._known = messages._head, True

    def __reduce__(self) -> tuple[Any, ...]:
        return (History, (list(self),))

    def _forget(self) -> None:
        self._head, self._known = None, False

    def head(self) -> Link | None:
        """The link of the last message (None for an empty history); made now when an
        edit dropped it."""
        if not self._known:
            self._head, self._known = _chain(self), True
        return self._head

    def append(self, message: Message, /) -> None:
        super().append(message)
        if self._known:
            self._head = Link(self._head, message)

    def extend(self, messages: Iterable[Message], /) -> None:
        added = list(messages)
        super().extend(added)
        if self._known:
            self._head = _chain(added, self._head)

    def __iadd__(self, messages: Iterable[Message], /) -> History:  # type: ignore[override,misc]
        self.extend(messages)
        return self

    @overload
    def __setitem__(self, index: SupportsIndex, value: Message, /) -> None: ...

    @overload
    def __setitem__(self, index: slice, value: Iterable[Message], /) -> None: ...

    def __setitem__(self, index: Any, value: Any, /) -> None:
        last = len(self) - 1
        super().__setitem__(index, value)
        head = self._head
        if (
            self._known
            and head is not None
            and not isinstance(index, slice)
            and index.__index__() in (last, -1)
        ):
            self._head = Link(head.before, value)
        else:
            self._forget()

    def pop(self, index: SupportsIndex = -1, /) -> Message:
        last = len(self) - 1
        message = super().pop(index)
        head = self._head
        if self._known and head is not None and index.__index__() in (last, -1):
            self._head = head.before
        else:
            self._forget()
        return message

    def __delitem__(self, index: SupportsIndex | slice, /) -> None:
        super().__delitem__(index)
        self._forget()

    def insert(self, index: SupportsIndex, message: Message, /) -> None:
        super().insert(index, message)
        self._forget()

    def remove(self, message: Message, /) -> None:
        super().remove(message)
        self._forget()

    def clear(self) -> None:
        super().clear()
        self._head, self._known = None, True

    def sort(self, *args: Any, **kwargs: Any) -> None:
        super().sort(*args, **kwargs)
        self._forget()

    def reverse(self) -> None:
        super().reverse()
        self._forget()

    def __imul__(self, count: SupportsIndex, /) -> History:
        super().__imul__(count)
        self._forget()
        return self


def chain_of(messages: Sequence[Message]) -> Link | None:
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
    head: Link | None
    kept, head = memo.get("chain", ((), None))
    n = len(kept)
    if n and not (n <= len(messages) and all(map(operator.is_, messages[:n], kept))):
        kept, head, n = (), None, 0
    if n < len(messages):
        head = _chain(messages[n:], head)
        memo["chain"] = (list(messages), head)
    assert head is not None
    return head
