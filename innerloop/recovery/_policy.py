"""Recovery thresholds and the pure rules that use them."""

from __future__ import annotations

import math
import random

import attrs

from innerloop._errors import ParamsError, ProviderError
from innerloop._validators import integer, number, string

__all__ = ["RecoveryPolicy", "backoff_delay", "jitter_fraction", "refused_wait"]

CONTINUATION_MESSAGE = "Your previous response was truncated. Continue from where you left off."
TOOL_FAILURE_NOTICE = (
    "Tool {name} has failed {count} consecutive times. "
    "Proceed without it or use an alternative approach."
)


_R = "recovery."
_fraction = number(gt=0, lt=1, prefix=_R)


def _notice_template(instance: object, attribute: attrs.Attribute[str], value: str) -> None:
    string(prefix=_R).verify(_R + attribute.name, value)
    try:
        value.format(name="run_shell", count=3)
    except (AttributeError, IndexError, KeyError, ValueError) as exc:
        raise ParamsError(
            _R + attribute.name,
            f"must be a template with only {{name}} and {{count}} placeholders, got {value!r} "
            f"({type(exc).__name__}: {exc}); double literal braces as {{{{ }}}}",
            value,
        ) from None


@attrs.frozen
class RecoveryPolicy:
    """Every number the recovery branches use. The defaults are the mission's."""

    backoff_initial: float = attrs.field(default=1.0, validator=number(gt=0, prefix=_R))
    backoff_factor: float = attrs.field(default=2.0, validator=number(ge=1, prefix=_R))
    """Each backoff wait is the previous one times this (1 keeps the wait constant)."""
    backoff_max: float = attrs.field(default=64.0, validator=number(gt=0, prefix=_R))
    backoff_jitter: bool = attrs.field(default=True, validator=attrs.validators.instance_of(bool))
    """Full jitter: each computed wait is drawn uniformly up to its exponential value, so
    runs limited together do not retry together. A Retry-After is honoured as given, up to
    ``max_retry_after``."""
    max_retry_after: float = attrs.field(default=300.0, validator=number(gt=0, prefix=_R))
    """The longest wait a server may ask for (Retry-After, retry-after-ms), in seconds. A
    longer one, or one that is not a finite number (``inf``, ``1e400``), is refused: the
    run falls back to the next model at once, or fails with a diagnostic quoting the
    header."""
    max_rate_limit_retries: int = attrs.field(default=5, validator=integer(ge=0, prefix=_R))
    """Backoff retries on one provider before falling back to the next one."""
    transient_retries: int = attrs.field(default=1, validator=integer(ge=0, prefix=_R))
    """Immediate retries after a transient failure before the run aborts."""
    tool_failure_threshold: int = attrs.field(default=3, validator=integer(ge=0, prefix=_R))
    max_tokens_compact_fraction: float = attrs.field(default=0.6, validator=_fraction)
    """On max_tokens with the history over the context budget, this share of the oldest
    history is compacted (under the budget, or with none, nothing is dropped)."""
    budget_compact_target: float = attrs.field(default=0.7, validator=_fraction)
    """Over the context budget, history is compacted to this share of the budget."""
    overflow_compact_target: float = attrs.field(default=0.5, validator=_fraction)
    """On a provider's context overflow, emergency compaction to this share of the budget."""
    keep_recent_messages: int = attrs.field(default=4, validator=integer(ge=0, prefix=_R))
    """Compaction keeps at least this many of the newest messages verbatim."""
    continuation_message: str = attrs.field(
        default=CONTINUATION_MESSAGE, validator=string(non_empty=True, prefix=_R)
    )
    tool_failure_notice: str = attrs.field(default=TOOL_FAILURE_NOTICE, validator=_notice_template)
    """Formatted with ``name`` (the tool) and ``count`` (its consecutive failures)."""

    def __attrs_post_init__(self) -> None:
        if self.backoff_max < self.backoff_initial:
            raise ParamsError(
                "recovery.backoff_max",
                f"must be >= backoff_initial ({self.backoff_initial:g}), got {self.backoff_max:g}",
                self.backoff_max,
            )


def backoff_delay(
    policy: RecoveryPolicy, attempt: int, retry_after: float | None, jitter: float = 1.0
) -> float:
    """Seconds to wait before retry number ``attempt`` (1-based).

    A provider's Retry-After overrides the exponential schedule and is taken as given, up
    to ``policy.max_retry_after`` (a value that is not finite is ignored).
    ``jitter`` in (0, 1] is the share of the computed wait to use (see
    :func:`jitter_fraction`); ignored when ``policy.backoff_jitter`` is off.
    """
    if retry_after is not None and math.isfinite(retry_after) and retry_after >= 0:
        return min(float(retry_after), policy.max_retry_after)
    delay = policy.backoff_initial * policy.backoff_factor ** max(attempt - 1, 0)
    delay = min(delay, policy.backoff_max)
    if policy.backoff_jitter:
        delay *= min(max(jitter, 0.0), 1.0)
    return float(delay)


def refused_wait(policy: RecoveryPolicy, error: ProviderError) -> str | None:
    """Why the wait ``error``'s server asks for will not be taken (its header quoted), or
    None when there is none to refuse: a value past ``policy.max_retry_after``, or a
    number that is not finite (``retry-after: inf``, ``1e400``; such a header reaches
    here as ``retry_after=None`` with the header kept)."""
    header = error.retry_after_header
    if header is None:
        return None
    cap = f"recovery.max_retry_after is {policy.max_retry_after:g} s"
    if error.retry_after is None:
        try:
            float(header.partition(":")[2])
        except ValueError:
            return None  # unreadable (a malformed date): the schedule applies
        return f"the server asks to wait {header!r}, which is not a finite time ({cap})"
    if error.retry_after > policy.max_retry_after:
        return (
            f"the server asks to wait {header!r} ({error.retry_after:g} s), longer than "
            f"{cap}; raise it to wait that long"
        )
    return None


def jitter_fraction(clock: object) -> float:
    """A share in (0, 1] for full jitter: ``clock.jitter()`` when the clock has one (a
    seeded ``FakeClock`` in tests, the workflow's deterministic random in Temporal), else
    a fresh random draw."""
    draw = getattr(clock, "jitter", None)
    if callable(draw):
        return float(draw())
    return 1.0 - random.random()  # spreading retries: no secret here
