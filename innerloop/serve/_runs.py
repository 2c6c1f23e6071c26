"""What every protocol shares: the served harness, its conversations and their tokens,
and runs read by a task of their own, so that a client going away aborts its run.

A conversation is a :class:`~innerloop.Session` of the harness, its id chosen by the client.
The first request naming a new id creates it and is answered with the conversation's token
(an HMAC of the id under the server's secret: nothing to store, and the same after a
restart when the secret is given); every later request on that id must carry the token.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import itertools
import json
import os
import secrets
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
from sse_starlette import EventSourceResponse

from innerloop._eventlog import EventLog
from innerloop._harness import Harness
from innerloop._secrets import scrub_secrets
from innerloop._session import Session
from innerloop.checkpoint import UnknownRunError
from innerloop.events import RunEvent
from innerloop.fsm import HarnessState, Interrupt, Run

__all__ = [
    "Conversation",
    "Refused",
    "Served",
    "answer_of",
    "event_json",
    "event_stream",
    "question",
]

PING_SECONDS = 15
"""How often a stream with nothing to say sends a comment (a closed connection shows)."""
ID_CHARS = 200
"""The longest conversation id taken."""
IN_MEMORY = 1000
"""The conversations a server without a checkpoint store keeps (the oldest go first)."""


class Refused(Exception):
    """A request the server will not serve: ``status`` is its HTTP status, the message
    says why and what to send instead."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(message)


@attrs.frozen
class Conversation:
    """A conversation a request named (or a new one): its session and token."""

    session: Session
    token: str
    new: bool


class Served:
    """A harness as served: its conversations (in memory without a checkpoint store) and
    the tasks reading its runs."""

    def __init__(
        self, harness: Harness[Any], secret: bytes | None = None, runs_dir: Path | None = None
    ) -> None:
        self.harness = harness
        self.secret = secret if secret is not None else secrets.token_bytes(32)
        self.runs_dir = runs_dir
        """Where each run's event log goes (``DIR/served-<time>-<n>.jsonl``), if anywhere."""
        self._logged = itertools.count(1)
        self._sessions: dict[str, Session] = {}
        """Conversations held in memory (a harness without a checkpoint store)."""
        self._tasks: set[asyncio.Task[None]] = set()

    def token(self, conversation_id: str) -> str:
        """The token of ``conversation_id``."""
        mac = hmac.new(self.secret, conversation_id.encode(), hashlib.sha256)
        return mac.hexdigest()[:32]

    def _known(self, conversation_id: str) -> bool:
        if self.harness.checkpointer is None:
            return conversation_id in self._sessions
        try:
            self.harness.checkpoint(conversation_id)
        except UnknownRunError:
            return False
        return True

    def conversation(self, conversation_id: Any, token: Any) -> Conversation:
        """The conversation ``conversation_id`` names, checked against ``token``
        (:class:`Refused` when it does not fit)."""
        if not isinstance(conversation_id, str) or not 0 < len(conversation_id) <= ID_CHARS:
            raise Refused(
                400,
                f"conversation_id is a string of 1 to {ID_CHARS} characters, "
                f"not {conversation_id!r}",
            )
        if token is not None and not isinstance(token, str):
            raise Refused(
                400, "conversation_token is the string the conversation's first answer carried"
            )
        known = self._known(conversation_id)
        expected = self.token(conversation_id)
        if token is not None:
            if not hmac.compare_digest(token.encode(), expected.encode()):
                raise Refused(
                    403,
                    f"conversation {conversation_id!r}: wrong "
                    "conversation_token; send the one its first answer carried",
                )
            if not known:
                raise Refused(
                    404,
                    f"unknown conversation {conversation_id!r}: nothing is "
                    "stored under it; start one by naming a new id without a token",
                )
        elif known:
            raise Refused(
                403,
                f"conversation {conversation_id!r} exists: continuing it "
                "wants its conversation_token (its first answer carried it)",
            )
        return Conversation(self.session(conversation_id), expected, not known)

    def session(self, conversation_id: str) -> Session:
        """The session of ``conversation_id`` (unchecked: :meth:`conversation` checks)."""
        session = self._sessions.get(conversation_id)
        if session is None:
            session = self.harness.session(conversation_id)
            if self.harness.checkpointer is None:
                self._keep(conversation_id, session)
        return session

    def _keep(self, conversation_id: str, session: Session) -> None:
        """Hold ``session`` in memory, dropping the oldest beyond :data:`IN_MEMORY`."""
        self._sessions[conversation_id] = session
        while len(self._sessions) > IN_MEMORY:
            del self._sessions[next(iter(self._sessions))]

    async def events(self, run: Run[Any]) -> AsyncIterator[RunEvent]:
        """``run``'s events, read by a task of its own: when the reader stops before the
        end (the client went away, its request was cancelled), the run is aborted and
        read on to its final state, so its history stays valid and its store keeps it."""
        queue: asyncio.Queue[RunEvent | None] = asyncio.Queue()

        async def pump() -> None:
            with contextlib.ExitStack() as stack:
                log = None if self.runs_dir is None else stack.enter_context(self._log(run))
                try:
                    async for event in run.events():
                        if log is not None:
                            log.write(event)
                        queue.put_nowait(event)
                finally:
                    queue.put_nowait(None)

        task = asyncio.get_running_loop().create_task(pump())
        self._tasks.add(task)
        task.add_done_callback(self._done)
        ended = False
        try:
            while (event := await queue.get()) is not None:
                yield event
            ended = True
        finally:
            if not ended:
                run.abort("the client went away")
        await task  # its error, if it raised

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: a reader that left does not await it

    def _log(self, run: Run[Any]) -> EventLog:
        """A new event log in :attr:`runs_dir` for ``run`` (its name never taken from a
        client's conversation id: the header holds that)."""
        assert self.runs_dir is not None
        name = f"served-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{next(self._logged)}"
        header = {"command": "serve", "run_id": run.run_id}
        return EventLog(self.runs_dir / f"{name}.jsonl", header)

    async def wait(self) -> None:
        """Until every run being read has ended (aborted runs included)."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)


def answer_of(state: HarnessState[Any]) -> str:
    """What a client is told a run answered: its typed output as JSON, the model's last
    message, or (a run that ended otherwise) one line saying how it ended."""
    if state.output_data is not None:
        return json.dumps(state.output_data, ensure_ascii=False)
    if state.exit_reason == "model_complete" and state.history:
        return state.history[-1].text
    if state.final_state == "suspended" and state.interrupt is not None:
        return f"[the run waits for an answer to its {state.interrupt.kind!r} interrupt]"
    return f"[the run ended without an answer: {state.exit_reason or state.final_state}]"


def event_json(event: RunEvent) -> dict[str, Any]:
    """``event`` as the event log writes it (``type`` first), keys and tokens scrubbed."""
    text = json.dumps(event.to_dict(), ensure_ascii=False, default=str)
    data: dict[str, Any] = json.loads(scrub_secrets(text))
    return data


def event_stream(
    chunks: AsyncIterator[dict[str, str]], headers: dict[str, str] | None = None
) -> EventSourceResponse:
    """Server-sent events (lines ending in a bare LF, as every client's parser splits
    them), a comment every :data:`PING_SECONDS`; the client going away is seen."""
    return EventSourceResponse(chunks, ping=PING_SECONDS, sep="\n", headers=headers)


def question(interrupt: Interrupt) -> str:
    """What an interrupt asks, in one line for a person."""
    if interrupt.kind == "approval":
        calls = interrupt.payload.get("calls", []) if isinstance(interrupt.payload, dict) else []
        listed = "; ".join(f"{c.get('name')}({json.dumps(c.get('input'))})" for c in calls)
        return f"The agent asks to run: {listed or interrupt.payload}. Approve?"
    return f"The agent asks ({interrupt.kind}): {json.dumps(interrupt.payload)}"
