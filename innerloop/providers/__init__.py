"""Canonical messages <-> provider wire formats, the provider protocol, and the Anthropic,
OpenAI Chat Completions and OpenAI Responses providers over their official SDKs."""

from innerloop.providers._anthropic import AnthropicProvider
from innerloop.providers._base import ModelStream, Provider, final_response
from innerloop.providers._errors import (
    error_from_body,
    error_from_exception,
    error_from_status,
    parse_retry_after,
)
from innerloop.providers._normalize import Dialect, WireRequest, build_request, normalize
from innerloop.providers._openai import OpenAIProvider
from innerloop.providers._responses import OpenAIResponsesProvider
from innerloop.providers._transport import AsyncioTransport

__all__ = [
    "AnthropicProvider",
    "AsyncioTransport",
    "Dialect",
    "ModelStream",
    "OpenAIProvider",
    "OpenAIResponsesProvider",
    "Provider",
    "WireRequest",
    "build_request",
    "error_from_body",
    "error_from_exception",
    "error_from_status",
    "final_response",
    "normalize",
    "parse_retry_after",
]
