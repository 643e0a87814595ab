"""The issue order of one gateway's requests (ordering.py), on the event loop alone."""

from __future__ import annotations

import asyncio

import pytest

from headwater.ingest.admission.ordering import IssueOrder


async def test_requests_issue_in_arrival_order_whatever_order_they_run_in():
    order = IssueOrder()
    places = [order.join("gw") for _ in range(5)]
    issued: list[int] = []

    async def request(i: int, delay: float) -> None:
        await asyncio.sleep(delay)  # later arrivals are ready first
        async with places[i].turn():
            issued.append(i)
            await asyncio.sleep(0)  # gives the loop back while holding the turn

    await asyncio.gather(*(request(i, 0.01 * (5 - i)) for i in range(5)))
    assert issued == [0, 1, 2, 3, 4]
    assert len(order) == 0, "lines of idle gateways are dropped"


async def test_gateways_do_not_wait_for_each_other():
    order = IssueOrder()
    held = order.join("gw-a")
    other = order.join("gw-b")
    async with other.turn():  # gw-a's earlier request holds nothing of gw-b
        pass
    held.leave()


async def test_a_request_that_gives_up_waiting_never_lets_a_later_one_overtake():
    order = IssueOrder()
    first, second, third = (order.join("gw") for _ in range(3))
    issued: list[str] = []

    async def give_up() -> None:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.01), second.turn():
                issued.append("second")

    async def last() -> None:
        async with third.turn():
            issued.append("third")

    waiter = asyncio.create_task(last())
    await give_up()
    await asyncio.sleep(0.02)
    assert issued == [], "the third went before the first had issued"
    async with first.turn():
        issued.append("first")
    await waiter
    assert issued == ["first", "third"]


async def test_a_request_refused_before_its_turn_hands_it_on():
    order = IssueOrder()
    refused, later = order.join("gw"), order.join("gw")
    refused.leave()  # e.g. admission refused it: no turn taken
    async with asyncio.timeout(1), later.turn():
        pass
