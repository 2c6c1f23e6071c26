"""Recovery thresholds and the pure rules that use them."""

from __future__ import annotations

import attrs

from innerloop._errors import ParamsError

__all__ = ["RecoveryPolicy", "backoff_delay"]

CONTINUATION_MESSAGE = "Your previous response was truncated. Continue from where you left off."
TOOL_FAILURE_NOTICE = (
    "Tool {name} has failed {count} consecutive times. "
    "Proceed without it or use an alternative approach."
)


def _positive(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if value <= 0:
        raise ParamsError(f"recovery.{attribute.name}", f"must be > 0, got {value!r}", value)


def _fraction(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not 0 < value < 1:
        raise ParamsError(
            f"recovery.{attribute.name}", f"must be between 0 and 1, got {value!r}", value
        )


def _non_negative_int(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if not isinstance(value, int) or value < 0:
        raise ParamsError(
            f"recovery.{attribute.name}", f"must be an integer >= 0, got {value!r}", value
        )


@attrs.frozen
class RecoveryPolicy:
    """Every number the recovery branches use. The defaults are the mission's."""

    backoff_initial: float = attrs.field(default=1.0, validator=_positive)
    backoff_factor: float = attrs.field(default=2.0, validator=_positive)
    backoff_max: float = attrs.field(default=64.0, validator=_positive)
    max_rate_limit_retries: int = attrs.field(default=5, validator=_non_negative_int)
    """Backoff retries on one provider before falling back to the next one."""
    transient_retries: int = attrs.field(default=1, validator=_non_negative_int)
    """Immediate retries after a transient failure before the run aborts."""
    tool_failure_threshold: int = attrs.field(default=3, validator=_non_negative_int)
    max_tokens_compact_fraction: float = attrs.field(default=0.6, validator=_fraction)
    """On max_tokens, this share of the oldest history is compacted."""
    budget_compact_target: float = attrs.field(default=0.7, validator=_fraction)
    """Over the context budget, history is compacted to this share of the budget."""
    overflow_compact_target: float = attrs.field(default=0.5, validator=_fraction)
    """On a provider's context overflow, emergency compaction to this share of the budget."""
    keep_recent_messages: int = attrs.field(default=4, validator=_non_negative_int)
    """Compaction keeps at least this many of the newest messages verbatim."""
    continuation_message: str = CONTINUATION_MESSAGE
    tool_failure_notice: str = TOOL_FAILURE_NOTICE


def backoff_delay(policy: RecoveryPolicy, attempt: int, retry_after: float | None) -> float:
    """Seconds to wait before retry number ``attempt`` (1-based).

    A provider's Retry-After overrides the exponential schedule.
    """
    if retry_after is not None and retry_after >= 0:
        return float(retry_after)
    delay = policy.backoff_initial * policy.backoff_factor ** max(attempt - 1, 0)
    return float(min(delay, policy.backoff_max))
