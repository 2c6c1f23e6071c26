"""What a guard declares about itself: the fields it reads and the budget it bounds.

A guard is a plain predicate; :func:`guard` attaches a frozen :class:`GuardInfo` to it::

    @guard(reads=("state.error", "state.transient_failures",
                  "params.recovery.transient_retries"), spends="transient_retries")
    def transient_retry(ctx: PhaseContext) -> bool: ...

``reads`` are the ``params``/``state`` fields the guard looks at (shown in the diagram's
edge tooltips; ``compile_spec`` checks each names a real field). ``given`` names one field
without which the guard never holds (``given="state.error"``: false while the state has no
error): the compiled machine then skips the guard while that field is None, and with one
look at it the guards next to it that are given the same field. A budget is what makes a
loop end, one of two ways:

* ``spends="b"``: the guard holds only while budget ``b`` is left, so its own edge is
  taken a bounded number of times (``transient_retry``, ``rate_limited_fallback``);
* ``exhausts="b"``: the guard holds once ``b`` is spent, so the edges listed *after* it out
  of the same state are only taken while ``b`` is left (``turn_limit``, ``cannot_shrink``).

Budget names are free: ``turns``, ``compactions`` and so on for the default machine's, any
name for a counter of a custom state. ``compile_spec`` proves from these declarations that
every cycle of a machine is bounded (see :func:`~innerloop.fsm.loop_proof`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

import attrs

from innerloop._errors import SpecError

if TYPE_CHECKING:
    from innerloop.fsm._context import PhaseContext

__all__ = ["GuardInfo", "declared", "guard", "guard_info", "unwrap_guard"]

ATTRIBUTE = "__innerloop_guard__"
ROOTS = ("params", "state")

F = TypeVar("F", bound=Callable[..., Any])


def _paths(value: Iterable[str]) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


def _check_reads(_: object, __: object, reads: tuple[str, ...]) -> None:
    for path in reads:
        parts = path.split(".")
        if len(parts) < 2 or parts[0] not in ROOTS or not all(p for p in parts[1:]):
            raise SpecError(
                "guard-reads",
                f"guard reads {path!r}: a read is a dotted path into the context's params "
                "or state, such as 'state.turns' or 'params.recovery.transient_retries' "
                "(a guard reads nothing else)",
            )


def _check_given(_: object, __: object, given: str | None) -> None:
    if given is not None:
        _check_reads(None, None, (given,))


def _check_budget(_: object, attribute: attrs.Attribute[Any], budget: str | None) -> None:
    if budget is not None and not budget.isidentifier():
        raise SpecError(
            "guard-budget",
            f"guard budget {attribute.name}={budget!r} must be a name (letters, digits, _), "
            "such as 'turns' or 'approvals'",
        )


@attrs.frozen
class GuardInfo:
    """What a guard declares; an undeclared guard has the empty one (reads unknown,
    bounds nothing)."""

    reads: tuple[str, ...] = attrs.field(default=(), converter=_paths, validator=_check_reads)
    """The ``params.*`` and ``state.*`` fields the guard reads."""
    spends: str | None = attrs.field(default=None, validator=_check_budget)
    """The budget the guard spends: it holds only while the budget is left."""
    exhausts: str | None = attrs.field(default=None, validator=_check_budget)
    """The budget whose exhaustion it guards: it holds once the budget is spent, so the
    edges listed after its edge (out of the same state) are taken only while it is left."""
    given: str | None = attrs.field(default=None, validator=_check_given)
    """A field the guard never holds without: while it is None the guard is false (and
    is not called)."""

    @property
    def budget(self) -> str:
        """``spends turns``, ``exhausts turns`` (both, comma-separated) or ``""``."""
        parts = [f"spends {self.spends}"] if self.spends else []
        parts += [f"exhausts {self.exhausts}"] if self.exhausts else []
        return ", ".join(parts)


def guard(
    *,
    reads: Iterable[str] = (),
    spends: str | None = None,
    exhausts: str | None = None,
    given: str | None = None,
) -> Callable[[F], F]:
    """Declare what the decorated guard reads, which budget it bounds and the field it
    never holds without; the function itself is returned, marked (``guard_info(fn)``
    reads it back as a :class:`GuardInfo`).

    ``reads`` are the ``params``/``state`` fields the guard looks at (``"state.turns"``,
    ``"params.max_turns"``: shown in the diagram's edge tooltips, and ``compile_spec``
    checks each names a real field). ``spends="b"``: the guard holds only while budget
    ``b`` is left, so its own edge is taken a bounded number of times. ``exhausts="b"``:
    the guard holds once ``b`` is spent, so the edges tried after it out of the same
    state are taken only while ``b`` is left. ``given`` names one of ``reads`` without
    which the guard never holds (``given="state.error"``): the compiled machine skips the
    guard while that field is None. ``compile_spec`` proves from these declarations that
    every cycle of a machine is bounded (see :func:`loop_proof` and the manual's "Every
    loop ends")."""
    info = GuardInfo(reads, spends, exhausts, given)

    def mark(fn: F) -> F:
        setattr(fn, ATTRIBUTE, info)
        return fn

    return mark


@attrs.frozen
class _Declared:
    """A guard with its info given beside it (``MachineSpec.with_guard(..., reads=...)``),
    so the function itself (perhaps shared, perhaps a lambda) is left unmarked."""

    fn: Callable[[PhaseContext], bool]
    info: GuardInfo

    def __call__(self, ctx: PhaseContext) -> bool:
        return self.fn(ctx)


def declared(fn: Callable[[PhaseContext], bool], info: GuardInfo) -> Callable[[PhaseContext], bool]:
    """``fn`` carrying ``info``, without changing ``fn``."""
    return _Declared(unwrap_guard(fn), info)


def unwrap_guard(fn: Callable[[PhaseContext], bool]) -> Callable[[PhaseContext], bool]:
    """The function a guard calls (the compiled machine calls it directly)."""
    return fn.fn if isinstance(fn, _Declared) else fn


def guard_info(fn: Callable[[PhaseContext], bool]) -> GuardInfo:
    """What ``fn`` declares (by :func:`guard` or ``with_guard``); empty if nothing."""
    if isinstance(fn, _Declared):
        return fn.info
    info = getattr(fn, ATTRIBUTE, None)
    return info if isinstance(info, GuardInfo) else GuardInfo()
