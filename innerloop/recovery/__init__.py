"""Recovery: policy numbers, clocks, token counting, compaction, prices, diagnostics."""

from innerloop.recovery._clock import Clock, ScaledClock, SystemClock
from innerloop.recovery._compaction import (
    SUMMARY_INSTRUCTIONS,
    CompactionRequest,
    CompactionResult,
    Compactor,
    SummarizerError,
    SummarizingCompactor,
    TruncatingCompactor,
    apply_cut,
    marker_text,
    plan_cut,
    render_transcript,
)
from innerloop.recovery._diagnostic import build_diagnostic, hash_content, scrub_secrets
from innerloop.recovery._exact import AnthropicTokenCounter, RequestTokenCounter
from innerloop.recovery._policy import RecoveryPolicy, backoff_delay
from innerloop.recovery._pricing import (
    DEFAULT_PRICES,
    Price,
    add_cost,
    cost_usd,
    merge_prices,
    price_for,
)
from innerloop.recovery._tokens import (
    CL100K_SHA256,
    ApproxTokenCounter,
    MessageTokenCache,
    TiktokenCounter,
    TokenCounter,
    TokenizerDataError,
    count_message,
    find_cl100k_data,
    load_cl100k,
)

__all__ = [
    "CL100K_SHA256",
    "DEFAULT_PRICES",
    "SUMMARY_INSTRUCTIONS",
    "AnthropicTokenCounter",
    "ApproxTokenCounter",
    "Clock",
    "CompactionRequest",
    "CompactionResult",
    "Compactor",
    "MessageTokenCache",
    "Price",
    "RecoveryPolicy",
    "RequestTokenCounter",
    "ScaledClock",
    "SummarizerError",
    "SummarizingCompactor",
    "SystemClock",
    "TiktokenCounter",
    "TokenCounter",
    "TokenizerDataError",
    "TruncatingCompactor",
    "add_cost",
    "apply_cut",
    "backoff_delay",
    "build_diagnostic",
    "cost_usd",
    "count_message",
    "find_cl100k_data",
    "hash_content",
    "load_cl100k",
    "marker_text",
    "merge_prices",
    "plan_cut",
    "price_for",
    "render_transcript",
    "scrub_secrets",
]
