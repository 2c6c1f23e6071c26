"""Recovery: policy numbers, clocks, token counting, compaction, prices, diagnostics."""

from innerloop.recovery._clock import Clock, ScaledClock, SystemClock
from innerloop.recovery._compaction import (
    CompactionRequest,
    CompactionResult,
    Compactor,
    TruncatingCompactor,
    apply_cut,
    plan_cut,
)
from innerloop.recovery._diagnostic import build_diagnostic, hash_content, scrub_secrets
from innerloop.recovery._policy import RecoveryPolicy, backoff_delay
from innerloop.recovery._pricing import DEFAULT_PRICES, Price, cost_usd, price_for
from innerloop.recovery._tokens import ApproxTokenCounter, MessageTokenCache, TokenCounter

__all__ = [
    "DEFAULT_PRICES",
    "ApproxTokenCounter",
    "Clock",
    "CompactionRequest",
    "CompactionResult",
    "Compactor",
    "MessageTokenCache",
    "Price",
    "RecoveryPolicy",
    "ScaledClock",
    "SystemClock",
    "TokenCounter",
    "TruncatingCompactor",
    "apply_cut",
    "backoff_delay",
    "build_diagnostic",
    "cost_usd",
    "hash_content",
    "plan_cut",
    "price_for",
    "scrub_secrets",
]
