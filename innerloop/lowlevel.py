"""The building blocks under innerloop's friendly names, for hosts that assemble their own
pieces: compaction planning, the tokenizer file, diagnostics, cost arithmetic, backoff
arithmetic, the pure request builders and error mapping, output capping, schema
generation, and the follower of a typed answer as it streams (``PartialOutput``, for a
custom ``stream`` state). The names in ``innerloop`` and its packages
are the ones most code needs; these are stable too, but rarely needed.
"""

from innerloop._secrets import SECRET_PATTERNS, replace_secrets
from innerloop.fsm._context import request_settings
from innerloop.fsm._output import PartialOutput
from innerloop.fsm._phases import execute_batch
from innerloop.providers._errors import (
    error_from_body,
    error_from_exception,
    error_from_status,
    parse_retry_after,
)
from innerloop.providers._fingerprint import history_fingerprint, request_fingerprint
from innerloop.providers._normalize import (
    RequestSettings,
    WireRequest,
    build_request,
    check_sendable,
    normalize,
)
from innerloop.recovery._compaction import (
    SUMMARY_INSTRUCTIONS,
    apply_cut,
    marker_text,
    plan_cut,
    render_transcript,
)
from innerloop.recovery._diagnostic import build_diagnostic, hash_content, scrub_secrets
from innerloop.recovery._policy import backoff_delay, jitter_fraction
from innerloop.recovery._pricing import add_cost
from innerloop.recovery._tokens import (
    CL100K_SHA256,
    count_message,
    document_tokens,
    find_cl100k_data,
    load_cl100k,
)
from innerloop.tools._output import cap_output
from innerloop.tools._schema import schema_for

__all__ = [
    "CL100K_SHA256",
    "SECRET_PATTERNS",
    "SUMMARY_INSTRUCTIONS",
    "PartialOutput",
    "RequestSettings",
    "WireRequest",
    "add_cost",
    "apply_cut",
    "backoff_delay",
    "build_diagnostic",
    "build_request",
    "cap_output",
    "check_sendable",
    "count_message",
    "document_tokens",
    "error_from_body",
    "error_from_exception",
    "error_from_status",
    "execute_batch",
    "find_cl100k_data",
    "hash_content",
    "history_fingerprint",
    "jitter_fraction",
    "load_cl100k",
    "marker_text",
    "normalize",
    "parse_retry_after",
    "plan_cut",
    "render_transcript",
    "replace_secrets",
    "request_fingerprint",
    "request_settings",
    "schema_for",
    "scrub_secrets",
]
