"""Serve a harness over the protocols its clients already speak: ``innerloop serve``.

    from innerloop.serve import app

    application = app(harness)          # an ASGI app: uvicorn, or mounted in your own

OpenAI-compatible chat completions at ``/v1/chat/completions``, MCP (streamable HTTP) at
``/mcp`` and over stdio (``innerloop serve --stdio``), AG-UI at ``/ag-ui``, the Vercel AI
SDK's UI message stream at ``/ai-sdk`` and A2A at ``/a2a``. See docs/guides/serve.md and
its page per protocol.
"""

from innerloop.serve._app import MAX_BODY_BYTES, ServedApp, app
from innerloop.serve._cli import collect_for_serving, load_harness

__all__ = ["MAX_BODY_BYTES", "ServedApp", "app", "collect_for_serving", "load_harness"]
