"""The live web view: ``innerloop ui``, ``innerloop run --ui``, ``innerloop demo --ui``.

A local page (Starlette and uvicorn; plain HTML, CSS and JS shipped in the package, so it
works offline) listing the runs of a folder of event logs and of a checkpoint store; for
one run, the machine's diagram with the current state highlighted live (server-sent
events, the log tailed as it grows), the trace with edge counts, the transition timeline,
the tool calls and the tokens and cost of each turn; served with the runs' harness
(``UIServer(catalog, harness=...)``), it answers what a suspended run waits on
(:class:`Answers`, through ``harness.resume``).

    from innerloop.ui import Catalog, UIServer

    with UIServer(Catalog(runs_dir=Path("runs")), port=0) as server:
        print(server.url)
"""

from innerloop.ui._answer import Answers
from innerloop.ui._app import create_app
from innerloop.ui._catalog import Catalog, UnknownRun
from innerloop.ui._server import DEFAULT_HOST, DEFAULT_PORT, UIServer

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "Answers",
    "Catalog",
    "UIServer",
    "UnknownRun",
    "create_app",
]
