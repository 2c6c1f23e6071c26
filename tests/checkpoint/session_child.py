"""A second process of the conversation tests (run with ``python -m``).

python -m tests.checkpoint.session_child URL CONVERSATION_ID TEXT
    opens the store at URL, goes on with the conversation by sending TEXT (the scripted
    model answers ``reply to TEXT``) and prints a JSON report of what it saw and did.
"""

from __future__ import annotations

import json
import sys

from innerloop import Harness
from innerloop.checkpoint import open_checkpointer
from innerloop.testing import ScriptedProvider, reply
from tests.checkpoint.test_session import PARAMS


def main(url: str, conversation_id: str, text: str) -> None:
    store = open_checkpointer(url)
    harness = Harness(PARAMS, [ScriptedProvider([reply(f"reply to {text}")])], checkpointer=store)
    session = harness.session(conversation_id)
    before = [m.text for m in session.history]
    state = session.send_sync(text)
    report = {
        "before": before,
        "exit_reason": state.exit_reason,
        "after": [m.text for m in state.history],
        "turns": state.turns,
        "turns_at_start": state.turns_at_start,
        "seq": session.seq,
    }
    store.close()
    print(json.dumps(report))


if __name__ == "__main__":
    main(*sys.argv[1:4])
