"""Serve a harness over the protocols its clients already speak: ``innerloop serve``.

    from innerloop.serve import app

    application = app(harness)          # an ASGI app: uvicorn, or mounted in your own

OpenAI-compatible chat completions at ``/v1/chat/completions`` and MCP (streamable HTTP)
at ``/mcp``; MCP over stdio with ``innerloop serve --stdio``. See docs/guides/serve.md.
"""

from innerloop.serve._app import MAX_BODY_BYTES, ServedApp, app
from innerloop.serve._cli import load_harness

__all__ = ["MAX_BODY_BYTES", "ServedApp", "app", "load_harness"]
