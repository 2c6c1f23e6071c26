"""Endpoint concurrency limits: EndpointSlots and RateLimitGates(max_concurrent=...)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from innerloop import HarnessParams
from innerloop._errors import ParamsError
from innerloop.providers import OpenAIProvider
from innerloop.recovery import RateLimitGates
from innerloop.recovery._gate import EndpointSlots
from innerloop.testing import FakeProvider, reply


def test_slots_serve_waiters_in_order() -> None:
    """With one slot, the second and third callers wait and go in arrival order."""
    slots = EndpointSlots(1)
    order: list[int] = []

    async def use(i: int) -> None:
        await slots.acquire()
        order.append(i)
        await asyncio.sleep(0)
        slots.release()

    async def main() -> None:
        await slots.acquire()
        tasks = [asyncio.create_task(use(i)) for i in (1, 2)]
        await asyncio.sleep(0)
        assert (slots.busy, slots.waited) == (1, 2)
        slots.release()
        await asyncio.gather(*tasks)

    asyncio.run(main())
    assert order == [1, 2]
    assert slots.busy == 0


def test_a_cancelled_waiter_leaves_no_slot_held() -> None:
    """A waiter cancelled while waiting takes no slot; the slot goes to the next."""
    slots = EndpointSlots(1)

    async def main() -> None:
        await slots.acquire()
        waiter = asyncio.create_task(slots.acquire())
        await asyncio.sleep(0)
        waiter.cancel()
        slots.release()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        await asyncio.sleep(0)

    asyncio.run(main())
    assert slots.busy == 0


def test_limits_are_per_endpoint_and_checked() -> None:
    """A mapping limits only the endpoints it names (trailing slash or not); models of one
    endpoint share its slots; a bad limit is refused at construction."""
    gates = RateLimitGates(max_concurrent={"http://127.0.0.1:9/v1": 1})
    local = OpenAIProvider(base_url="http://127.0.0.1:9/v1/", name="local")
    other = OpenAIProvider("sk-test", base_url="http://127.0.0.1:10/v1", name="other")
    a, b = gates.gate(local, "a"), gates.gate(local, "b")
    assert a.slots is not None
    assert a.slots is b.slots
    assert gates.gate(other, "a").slots is None
    assert RateLimitGates().gate(local, "a").slots is None
    with pytest.raises(ParamsError, match="max_concurrent: must be an int >= 1"):
        RateLimitGates(max_concurrent=0)


def test_runs_on_a_limited_endpoint_never_overlap(make_harness: Any) -> None:
    """Eight concurrent runs against a one-slot endpoint: at most one call is in flight
    (from before it is sent until its stream is closed), and all complete."""
    in_flight, most = 0, 0

    async def handler(request: Any) -> Any:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        await asyncio.sleep(0.001)
        in_flight -= 1
        return reply("ok")

    provider = FakeProvider(handler)
    gates = RateLimitGates(max_concurrent=1)
    harness = make_harness(HarnessParams(model="scripted:m"), [provider], gates=gates)

    async def eight() -> list[Any]:
        return await asyncio.gather(*(harness.run("go") for _ in range(8)))

    states = asyncio.run(eight())
    assert [s.exit_reason for s in states] == ["model_complete"] * 8
    assert most == 1
