"""What keeps a served harness's event loop from stalling under many clients: a served
request leaves nothing in a reference cycle (a full garbage collection walks every tracked
object while 200 streams wait: bench/serve.py), a conversation holds what the next message
needs, not the finished run, and requests arriving at once are set up over several turns."""

from __future__ import annotations

import asyncio
import gc
import json
import weakref
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from starlette.types import Message

from bench.serve import PROTOCOLS, _request, answer_for, asgi_call, paced_harness, post_scope
from innerloop import Harness, HarnessParams
from innerloop.events import TextDelta
from innerloop.serve import app, collect_for_serving
from innerloop.serve._cli import YOUNG_OBJECTS
from innerloop.serve._runs import Gone, Served, Turns


@pytest.fixture
def no_gc() -> Iterator[None]:
    """The cyclic garbage collector off: only reference counts free anything."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


async def test_a_watch_for_the_client_leaving_is_freed_without_the_collector(
    no_gc: None,
) -> None:
    """Leaving ``async with Gone(receive)`` (the client stayed) cancels its watcher; the
    watcher's CancelledError holds a traceback, its frame the Gone: nothing of it may
    still hold the Gone once the cancellation was delivered."""
    never = asyncio.Event()

    async def receive() -> dict[str, Any]:
        await never.wait()
        return {"type": "http.disconnect"}

    async with Gone(receive) as gone:
        await asyncio.sleep(0)  # the watcher waits in receive()
    left = weakref.ref(gone)
    del gone
    for _ in range(3):
        await asyncio.sleep(0)  # the cancellation delivered, the watcher done
    assert left() is None


async def test_a_conversation_keeps_its_state_not_its_ended_run(no_gc: None) -> None:
    """Once a served message's run has ended, its conversation holds the state the next
    message goes on from, not the run (its task, scopes, requests): with the collector
    off, the run is freed as its reader drops it, and the conversation goes on."""
    served = Served(paced_harness(0.0))
    session = served.session("c")
    run = session.start("client 3")
    with served.read(run, session=session) as reading:
        said = [event async for event in reading]
    assert said
    await asyncio.sleep(0)  # the reading task's callbacks
    gone = weakref.ref(run)
    del run, reading, said
    assert gone() is None
    assert session.state is not None
    assert session.state.final_state == "model_complete"
    assert [m.text for m in session.history] == ["client 3", answer_for(3)]
    await session.send("client 4")
    assert [m.text for m in session.history][2:] == ["client 4", answer_for(4)]


async def test_requests_arriving_at_once_are_set_up_over_turns_of_the_loop() -> None:
    """Turns(2): of five takers at once, two go on in the first turn, two in a later one,
    the last after; each in its order."""
    turns, passed = Turns(2), []

    async def taker(number: int) -> None:
        await turns.take()
        passed.append(number)

    tasks = [asyncio.create_task(taker(n)) for n in range(5)]
    await asyncio.sleep(0)
    assert passed == [0, 1]
    seen = [list(passed)]
    while len(passed) < 5:
        await asyncio.sleep(0)
        if passed != seen[-1]:
            seen.append(list(passed))
    assert seen == [[0, 1], [0, 1, 2, 3], [0, 1, 2, 3, 4]]
    await asyncio.gather(*tasks)


def test_serving_freezes_what_start_up_made_and_collects_the_young_less_often() -> None:
    """After collect_for_serving, start-up's objects are out of the collector's sight and
    the youngest generation is collected every YOUNG_OBJECTS allocations."""
    made = [{"start-up": n} for n in range(1000)]
    thresholds = gc.get_threshold()
    try:
        collect_for_serving()
        assert gc.get_freeze_count() >= len(made)
        assert gc.get_threshold() == (YOUNG_OBJECTS, *thresholds[1:])
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)


class _Held:
    """A model's stream that said its first words and waits for more (until aborted)."""

    def __init__(self, model: _HeldModel) -> None:
        self.model = model

    async def __aiter__(self) -> AsyncIterator[Any]:
        yield TextDelta(0, "Hello, ")
        yield TextDelta(0, "and")
        self.model.spoke()
        await asyncio.Event().wait()

    async def aclose(self) -> None:
        return None


class _HeldModel:
    """Each answer held after its first words; ``all_said`` set once ``streams`` were."""

    name = "scripted"
    dialect = "anthropic"

    def __init__(self, streams: int) -> None:
        self.streams = streams
        self.all_said = asyncio.Event()

    def spoke(self) -> None:
        self.streams -= 1
        if self.streams == 0:
            self.all_said.set()

    async def open(self, request: Any) -> _Held:
        return _Held(self)

    async def aclose(self) -> None:
        return None


OBJECTS_A_STREAM = 140
"""The most objects the garbage collector tracks for one stream in flight, the client's
own ASGI callables included (129 to 135; 181 to 187 with Starlette's routing around each
run's route and a closure where an object of one slot or a method does)."""


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_stream_in_flight_holds_few_objects_for_the_collector(protocol: str) -> None:
    """Every full garbage collection walks what the streams in flight hold, all of them
    waiting: 50 streams, each mid-answer, add at most OBJECTS_A_STREAM tracked objects
    apiece (counted once the collector freed what it could)."""
    clients = 50
    model = _HeldModel(clients)
    served = app(Harness(HarnessParams(model="scripted:m"), [model]))
    async with served.lifespan(served):
        gc.collect()
        before = len(gc.get_objects())
        gone = asyncio.Event()
        calls = []
        for client in range(clients):
            path, body = _request(protocol, client, "held")
            request = [{"type": "http.request", "body": json.dumps(body).encode()}]

            async def receive(request: list[dict[str, Any]] = request) -> Message:
                if request:
                    return request.pop()
                await gone.wait()
                return {"type": "http.disconnect"}

            async def send(message: Message) -> None:
                return None

            calls.append(asyncio.create_task(served(post_scope(path), receive, send)))
        await model.all_said.wait()
        for _ in range(5):
            await asyncio.sleep(0)  # what the last words made is written
        gc.collect()
        held = (len(gc.get_objects()) - before) / clients
        gone.set()  # every client leaves: the runs are aborted
        await asyncio.gather(*calls)
    assert held <= OBJECTS_A_STREAM, f"{held:.1f} objects a stream"


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_served_stream_leaves_nothing_for_the_collector(protocol: str) -> None:
    """A stream served whole, the collector off meanwhile: everything it made is freed
    by reference counts (the conversation kept), nothing left in a cycle to collect."""
    served = app(paced_harness(0.0))
    async with served.lifespan(served):
        await asgi_call(served, *_request(protocol, 1, "warm"))
        gc.collect()
        gc.disable()
        try:
            sent = await asgi_call(served, *_request(protocol, 2, "whole"))
            for _ in range(3):
                await asyncio.sleep(0)  # the reading task's callbacks
            assert sent[-1]["more_body"] is False
            del sent
            assert gc.collect() == 0
        finally:
            gc.enable()
