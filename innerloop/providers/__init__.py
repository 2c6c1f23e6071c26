"""The provider protocol and the Anthropic, OpenAI Chat Completions and OpenAI Responses
providers over their official SDKs.

The pure request builders and the error mapping under them are in
:mod:`innerloop.lowlevel`."""

from typing import TYPE_CHECKING

from innerloop._lazy import lazy_names
from innerloop.providers._base import ModelStream, Provider, final_response
from innerloop.providers._normalize import Dialect, WireRequest

if TYPE_CHECKING:
    from innerloop.providers._anthropic import AnthropicProvider
    from innerloop.providers._openai import OpenAIProvider
    from innerloop.providers._responses import OpenAIResponsesProvider
    from innerloop.providers._transport import AsyncioTransport

_LAZY = {
    "AnthropicProvider": "innerloop.providers._anthropic",
    "AsyncioTransport": "innerloop.providers._transport",
    "OpenAIProvider": "innerloop.providers._openai",
    "OpenAIResponsesProvider": "innerloop.providers._responses",
}
"""The providers over the HTTP client, imported when first named (``import innerloop``
does not load the HTTP stack)."""


__getattr__ = lazy_names(__name__, _LAZY)


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
