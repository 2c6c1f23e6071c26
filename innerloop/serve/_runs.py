"""What every protocol shares: the served harness, its conversations and their tokens,
and runs read by a task of their own, so that a client going away aborts its run.

A conversation is a :class:`~innerloop.Session` of the harness, its id chosen by the client.
The first request naming a new id creates it and is answered with the conversation's token
(an HMAC of the id under the server's secret: nothing to store, and the same after a
restart when the secret is given); every later request on that id must carry the token.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import hashlib
import hmac
import itertools
import json
import os
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs
import pydantic_core
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from innerloop._eventlog import EventLog
from innerloop._harness import Harness
from innerloop._secrets import scrub_secrets
from innerloop._session import Session
from innerloop.checkpoint import UnknownRunError
from innerloop.events import ModelResponseEvent, RunEvent
from innerloop.fsm import HarnessState, Interrupt, Run

__all__ = [
    "Conversation",
    "Gone",
    "Reading",
    "Refused",
    "Served",
    "Turns",
    "answer_of",
    "event_json",
    "event_stream",
    "figures",
    "question",
    "summary",
    "wire_json",
]

PING_SECONDS = 15
"""How often a stream with nothing to say sends a comment (a proxy keeps it open)."""
SSE_HEADERS = {"cache-control": "no-store", "x-accel-buffering": "no"}
"""A stream's headers: nothing caches it, no proxy holds it back."""
ID_CHARS = 200
"""The longest conversation id taken."""
IN_MEMORY = 1000
"""The conversations a server without a checkpoint store keeps (the oldest go first)."""
BURST = 16
"""The requests one turn of the event loop sets up at most (see :class:`Turns`)."""


class Refused(Exception):
    """A request the server will not serve: ``status`` is its HTTP status, the message
    says why and what to send instead; ``unparsed`` when its body is not JSON at all (a
    protocol may answer that apart: JSON-RPC's parse error)."""

    def __init__(self, status: int, message: str, *, unparsed: bool = False) -> None:
        self.status = status
        self.unparsed = unparsed
        super().__init__(message)


@attrs.frozen
class Conversation:
    """A conversation a request named (or a new one): its session and token."""

    session: Session
    token: str
    new: bool


class Turns:
    """At most ``burst`` callers of :meth:`take` go on in one turn of the event loop; the
    others wait, in their order, for the turns after. A request's set-up (its body, its
    conversation, its run's start) costs about half a millisecond: 200 clients arriving at
    once were one turn of 100 ms, every stream and the watchdog waiting for it."""

    def __init__(self, burst: int = BURST) -> None:
        self.burst = burst
        self._taken = 0
        self._waiting: collections.deque[asyncio.Future[None]] = collections.deque()

    async def take(self) -> None:
        """Return in a turn with room (this one, or a later one)."""
        loop = asyncio.get_running_loop()
        if self._taken < self.burst and not self._waiting:
            if self._taken == 0:
                loop.call_soon(self._next_turn, loop)
            self._taken += 1
            return
        waiting = loop.create_future()
        self._waiting.append(waiting)
        await waiting

    def _next_turn(self, loop: asyncio.AbstractEventLoop) -> None:
        self._taken = 0
        while self._waiting and self._taken < self.burst:
            waiting = self._waiting.popleft()
            if not waiting.done():  # not cancelled meanwhile
                waiting.set_result(None)
                self._taken += 1
        if self._taken:
            loop.call_soon(self._next_turn, loop)


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
        self.turns = Turns()
        """What spreads the set-up of requests arriving at once over turns of the loop."""

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

    def read(
        self, run: Run[Any], *, events: bool = True, session: Session | None = None
    ) -> Reading:
        """``run`` read from now on by a task of its own (see :class:`Reading`); with
        ``events=False``, when no one wants them (nor the event log), the run goes on
        without making them (``run.run()``, the quiet path) and the reading yields none.
        ``session``, the conversation ``run`` is a message of, lets go of the run when it
        ends (it keeps its state: a thousand kept conversations, each holding its last run,
        made every full garbage collection walk their tasks, scopes and requests)."""
        logged = self.runs_dir is not None
        reading = Reading(run, self._log if logged else None, events or logged)
        self._tasks.add(reading.task)
        # one callback (each holds a copy of the context: objects a stream keeps)
        reading.task.add_done_callback(functools.partial(self._done, session))
        return reading

    def _done(self, session: Session | None, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if session is not None:
            session.settle()
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
        """Until every run being read has ended (aborted runs included). The tasks
        waited for are let go here, not only by their done callbacks: awaiting a gather of
        tasks already done need not yield to the loop (3.12 on), so the callbacks would
        never run and this would spin."""
        while self._tasks:
            tasks = tuple(self._tasks)
            await asyncio.gather(*tasks, return_exceptions=True)
            self._tasks.difference_update(tasks)


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


def summary(state: HarnessState[Any]) -> dict[str, Any]:
    """How the run ended: exit reason, final state, typed output, pending interrupt."""
    interrupt = state.interrupt
    return {
        "exit_reason": state.exit_reason,
        "final_state": state.final_state,
        "output": state.output_data,
        "interrupt": None
        if interrupt is None or state.final_state != "suspended"
        else {
            "kind": interrupt.kind,
            "payload": interrupt.payload,
            "path": interrupt.path,
        },
    }


def figures(run: Run[Any]) -> dict[str, Any]:
    """Where ``run`` is: its :func:`summary`, its state, turns, tokens and cost."""
    state = run.state
    return summary(state) | {
        "state": run.current,
        "turns": state.turns,
        "tokens": state.usage.total_tokens,
        "cost_usd": state.cost_usd,
    }


def event_json(event: RunEvent) -> dict[str, Any]:
    """``event`` as the event log writes it (``type`` first), keys and tokens scrubbed."""
    text = json.dumps(event.to_dict(), ensure_ascii=False, default=str)
    data: dict[str, Any] = json.loads(scrub_secrets(text))
    return data


def wire_json(data: Any) -> str:
    """``data`` as one line of JSON for a stream: compact, non-ASCII kept, NaN and the
    infinities as null; written by pydantic-core's encoder (a tenth of ``json.dumps``'s
    time on a stream's small events; the one the AG-UI package's models write with)."""
    return pydantic_core.to_json(data, inf_nan_mode="null").decode()


class _Ping:
    """What a reading's queue holds when its reader is due a ping."""


_PING = _Ping()


class Reading:
    """A run read by a task of its own from the moment a request made it: its events, for
    one reader (``async for event in reading``). When that reader leaves before the end,
    or never comes (the client went away before the answer's first byte), :meth:`close`
    aborts the run, and the task reads it on to its final state: its history stays
    valid, its store keeps it, and its conversation takes the next message."""

    def __init__(
        self, run: Run[Any], log: Callable[[Run[Any]], EventLog] | None, events: bool = True
    ) -> None:
        self.run = run
        self.idle: Callable[[bool], Awaitable[None]] | None = None
        """Awaited when the reader is about to wait for the run (``False``), and again
        each :data:`PING_SECONDS` the run says nothing (``True``): a stream writes then."""
        self._queue: asyncio.Queue[RunEvent | _Ping | None] = asyncio.Queue()
        self._said = 0.0
        """When (the loop's time) the reader last had an event or a ping."""
        self._pinger: asyncio.TimerHandle | None = None
        self._turns: dict[int, dict[str, Any]] = {}
        self._ended = False
        pump = self._pump(log) if events else self._quietly()
        self.task = asyncio.get_running_loop().create_task(pump)

    async def _pump(self, opened: Callable[[Run[Any]], EventLog] | None) -> None:
        await asyncio.sleep(0)  # the run's first steps in a turn of the loop of their own
        log = None if opened is None else opened(self.run)
        with log if log is not None else contextlib.nullcontext():
            try:
                async for event in self.run.events():
                    if log is not None:
                        log.write(event)
                    if type(event) is ModelResponseEvent:
                        self._turns[id(event)] = figures(self.run)
                    self._queue.put_nowait(event)
            finally:
                self._queue.put_nowait(None)

    async def _quietly(self) -> None:
        try:
            await self.run.run()
        finally:
            self._queue.put_nowait(None)

    async def __aiter__(self) -> AsyncIterator[RunEvent]:
        try:
            while (event := await self._next()) is not None:
                yield event
            self._ended = True
        finally:
            self.close()
        await self.task  # its error, if it raised

    async def _next(self) -> RunEvent | None:
        queue, idle = self._queue, self.idle
        if queue.empty() and idle is not None:
            await idle(False)  # what is ready goes out before the wait
            if self._pinger is None:  # one timer a reading, not one a wait
                self._said = asyncio.get_running_loop().time()
                self._ping_due()
        while type(event := await queue.get()) is _Ping:
            assert idle is not None
            await idle(True)
        self._said = asyncio.get_running_loop().time()
        return event  # type: ignore[return-value]

    def _ping_due(self) -> None:
        """A ping for the reader when the run has said nothing for :data:`PING_SECONDS`;
        the timer set again for the next time one may be due."""
        loop = asyncio.get_running_loop()
        if loop.time() - self._said >= PING_SECONDS and self._queue.empty():
            self._queue.put_nowait(_PING)
            self._said = loop.time()
        self._pinger = loop.call_at(self._said + PING_SECONDS, self._ping_due)

    def figures_at(self, event: ModelResponseEvent) -> dict[str, Any]:
        """The run's :func:`figures` as it answered ``event`` (the reader may be behind
        it: the run goes on meanwhile)."""
        return self._turns.pop(id(event), None) or figures(self.run)

    def close(self) -> None:
        """Abort the run unless its events were read to the end (the reader left)."""
        if self._pinger is not None:
            self._pinger.cancel()
        if not self._ended:
            self._ended = True
            self.run.abort("the client went away")

    def __enter__(self) -> Reading:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Gone:
    """Within ``async with Gone(receive) as gone``: the current task is cancelled when
    the client goes away (an ``http.disconnect``), the cancellation ends the block
    quietly, and ``gone.left`` says so afterwards. One task watches; no other is made."""

    def __init__(self, receive: Receive) -> None:
        self.receive = receive
        self.left = False

    async def __aenter__(self) -> Gone:
        task = asyncio.current_task()
        assert task is not None
        self.task = task
        self.watcher = asyncio.get_running_loop().create_task(self._watch())
        return self

    async def _watch(self) -> None:
        while (await self.receive())["type"] != "http.disconnect":
            pass
        self.left = True
        self.task.cancel()

    async def __aexit__(self, kind: type[BaseException] | None, *exc: object) -> bool:
        # dropped as it is cancelled: its CancelledError's traceback holds its frame, which
        # holds this object; kept, that cycle would wait for the garbage collector
        watcher = self.watcher
        del self.watcher
        watcher.cancel()
        if self.left and kind is asyncio.CancelledError:
            self.task.uncancel()
            return True
        return False


class _RunStream(Response):
    """Server-sent events of a run (lines ending in a bare LF, as every client's parser
    splits them). What is ready goes out in one write when the stream is about to wait
    for the run (a run's last events, a turn's first ones: fewer writes, one wake-up of
    the client for them); a comment every :data:`PING_SECONDS` the run is quiet. When the
    response ends before the run does (the client went away, even before the first
    byte), the run is aborted."""

    def __init__(
        self,
        chunks: AsyncIterator[str],
        reading: Reading,
        headers: dict[str, str] | None,
    ) -> None:
        self.status_code, self.media_type, self.background = 200, "text/event-stream", None
        self.init_headers(SSE_HEADERS | (headers or {}))  # no content-length: a stream
        self.chunks = chunks
        self.reading = reading
        self.ready: list[str] = []
        """What is read and not yet written."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        reading, chunks, ready = self.reading, self.chunks, self.ready
        self.send = send
        reading.idle = self.write  # a method, not a closure: fewer objects a stream holds
        try:
            async with Gone(receive):
                await send(
                    {"type": "http.response.start", "status": 200, "headers": self.raw_headers}
                )
                async for chunk in chunks:
                    ready.append(f"data: {chunk}\n\n")  # written meanwhile
                await self.write(more=False)
        except OSError:
            pass  # the client went away as the server wrote to it
        finally:
            reading.idle = None  # no cycle left: the reading held this stream
            await chunks.aclose()  # type: ignore[attr-defined]
            reading.close()

    async def write(self, ping: bool = False, more: bool = True) -> None:
        """What is ready (and a ping) in one write; with ``more=False``, the last."""
        body = "".join(self.ready) + (": ping\n\n" if ping else "")
        self.ready.clear()
        if body or not more:
            await self.send(
                {"type": "http.response.body", "body": body.encode(), "more_body": more}
            )


def event_stream(
    chunks: AsyncIterator[str], reading: Reading, headers: dict[str, str] | None = None
) -> Response:
    """Server-sent events of ``reading``'s run: each of ``chunks`` (one line: its data)
    an event; the client going away, at any time, aborts the run."""
    return _RunStream(chunks, reading, headers)


def question(interrupt: Interrupt) -> str:
    """What an interrupt asks, in one line for a person."""
    if interrupt.kind == "approval":
        calls = interrupt.payload.get("calls", []) if isinstance(interrupt.payload, dict) else []
        listed = "; ".join(f"{c.get('name')}({json.dumps(c.get('input'))})" for c in calls)
        return f"The agent asks to run: {listed or interrupt.payload}. Approve?"
    return f"The agent asks ({interrupt.kind}): {json.dumps(interrupt.payload)}"
