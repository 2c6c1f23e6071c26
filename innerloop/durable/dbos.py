"""The DBOS adapter (needs ``dbos``: ``pip install 'innerloop[durable]'``)."""

from innerloop.durable._dbos import DBOSClock, DBOSLoopClient, DBOSLoops, dbos_config

__all__ = ["DBOSClock", "DBOSLoopClient", "DBOSLoops", "dbos_config"]
