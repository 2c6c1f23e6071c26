"""Recovery: policy numbers, clocks, token counting, compaction, prices.

The building blocks under these (cut planning, the tokenizer file, diagnostics, cost
arithmetic) are in :mod:`innerloop.lowlevel`.
"""

from innerloop.recovery._clock import Clock, ScaledClock, SystemClock
from innerloop.recovery._compaction import (
    CompactionRequest,
    CompactionResult,
    Compactor,
    SummarizerError,
    SummarizingCompactor,
    TruncatingCompactor,
)
from innerloop.recovery._exact import AnthropicTokenCounter
from innerloop.recovery._gate import Admission, RateLimitGate, RateLimitGates, shared_gates
from innerloop.recovery._gguf import GGUFTokenCounter
from innerloop.recovery._policy import RecoveryPolicy
from innerloop.recovery._pricing import (
    DEFAULT_PRICES,
    Price,
    cost_usd,
    kept_price,
    merge_prices,
    price_for,
)
from innerloop.recovery._tokens import (
    ApproxTokenCounter,
    MessageTokenCache,
    RequestTokenCounter,
    TiktokenCounter,
    TokenCounter,
    TokenizerDataError,
)

__all__ = [
    "DEFAULT_PRICES",
    "Admission",
    "AnthropicTokenCounter",
    "ApproxTokenCounter",
    "Clock",
    "CompactionRequest",
    "CompactionResult",
    "Compactor",
    "GGUFTokenCounter",
    "MessageTokenCache",
    "Price",
    "RateLimitGate",
    "RateLimitGates",
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
    "cost_usd",
    "kept_price",
    "merge_prices",
    "price_for",
    "shared_gates",
]
