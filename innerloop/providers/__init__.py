"""The provider protocol and the Anthropic, OpenAI Chat Completions and OpenAI Responses
providers over their official SDKs.

The pure request builders and the error mapping under them are in
:mod:`innerloop.lowlevel`."""

from innerloop.providers._anthropic import AnthropicProvider
from innerloop.providers._base import ModelStream, Provider, final_response
from innerloop.providers._normalize import Dialect, WireRequest
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
    "final_response",
]
