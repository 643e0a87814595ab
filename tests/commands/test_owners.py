"""The rules of device leases (owners.py, leases.py) on a log kept in memory.

Two replicas' OwnerBooks share one ordered log, as they share command-owners.v1: what one
writes, both read, in the same order. The clock is the test's. The same rules on the real
broker, with two ingest replicas: test_two_replicas.py.
"""

from __future__ import annotations

import asyncio

from headwater.ingest.commands.leases import Lease
from headwater.ingest.commands.owners import OwnerBook

DEVICE = ("acme", "acme-001")
GRACE_S = 4.0


class SharedLog:
    """An ordered log every book reads, like a topic's partition."""

    def __init__(self, grace_s: float = GRACE_S) -> None:
        self.grace_s = grace_s
        self.records: list[Lease] = []
        self.books: list[OwnerBook] = []
        self.now = 100.0

    def book(self, name: str, oldest: int | None = 0) -> OwnerBook:
        owners = OwnerBook(
            self.grace_s, name, self.write, lambda _d: oldest, clock=lambda: self.now
        )
        self.books.append(owners)
        return owners

    async def write(self, lease: Lease) -> asyncio.Future[None]:
        self.records.append(lease)
        for owners in self.books:
            asyncio.get_running_loop().call_soon(owners.read, lease)
        acked: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        acked.set_result(None)
        return acked


async def test_the_first_claim_holds_the_device_for_every_replica_until_the_grace_passes():
    log = SharedLog()
    one, two = log.book("r1"), log.book("r2")
    one.connected("gw-a")
    two.connected("gw-a2")
    assert await one.cover(DEVICE, "gw-a", 5)  # claimed, then extended over offset 5
    assert one.valid(DEVICE, "gw-a", 5) and not one.valid(DEVICE, "gw-a", 6)
    assert not await two.cover(DEVICE, "gw-a2", 5)  # the other replica's gateway: refused
    assert two.owner(DEVICE) == "gw-a" and two.gateway_of(DEVICE, 5) == "gw-a"
    assert two.gateway_of(DEVICE, 6) is None  # not sent to anyone yet
    # Fencing by time: a holder that does not renew stops before anyone may claim.
    log.now += 0.75 * GRACE_S
    assert not one.valid(DEVICE, "gw-a", 5)
    assert not await two.cover(DEVICE, "gw-a2", 5)
    log.now += 0.25 * GRACE_S
    assert await two.cover(DEVICE, "gw-a2", 9)  # lapsed: failover
    # What gw-a may hold stays gw-a's, for every replica; the rest is gw-a2's.
    for owners in (one, two):
        assert owners.gateway_of(DEVICE, 5) == "gw-a"
        assert owners.gateway_of(DEVICE, 9) == "gw-a2"
        assert owners.owner(DEVICE) == "gw-a2"
    assert DEVICE not in one._held and two.size == 1
    assert not await one.cover(DEVICE, "gw-a", 10)  # the old owner does not take it back


async def test_of_two_claims_on_one_version_the_first_in_the_log_wins_and_fences_the_other():
    log = SharedLog()
    one, two = log.book("r1"), log.book("r2")
    won = await asyncio.gather(one.cover(DEVICE, "gw-a", 1), two.cover(DEVICE, "gw-a2", 1))
    assert sorted(won) == [False, True]
    winner = "gw-a" if won[0] else "gw-a2"
    assert one.owner(DEVICE) == two.owner(DEVICE) == winner
    assert [r.version for r in log.records][:2] == [1, 1]  # the loser's record is ignored
    assert one.size + two.size == 1


async def test_a_renewed_lease_is_kept_and_a_released_one_goes_to_its_own_gateway_at_once():
    grace_s = 0.8  # renewed every quarter of it, on the event loop's own clock
    log = SharedLog(grace_s)
    one, two = log.book("r1"), log.book("r2")
    one.connected("gw-a")
    assert await one.cover(DEVICE, "gw-a", 3)
    keeping = asyncio.create_task(one.keep_forever())
    try:
        for _ in range(6):  # three graces, renewed every quarter
            log.now += grace_s / 2
            await asyncio.sleep(grace_s / 4 + 0.05)
            assert not await two.cover(DEVICE, "gw-a2", 3)
        assert one.valid(DEVICE, "gw-a", 3)
        one.disconnected("gw-a")  # its last stream closed: released at once
        for _ in range(50):
            if log.records[-1].released:
                break
            await asyncio.sleep(0.05)
        assert log.records[-1].released and one.size == 0
        assert not await two.cover(DEVICE, "gw-a2", 3)  # another gateway waits the grace
        two.connected("gw-a")
        assert await two.cover(DEVICE, "gw-a", 4)  # its own gateway, elsewhere: at once
        assert two.gateway_of(DEVICE, 4) == "gw-a" and not one.valid(DEVICE, "gw-a", 3)
    finally:
        keeping.cancel()
        await asyncio.gather(keeping, return_exceptions=True)


async def test_a_holder_whose_renewal_comes_second_loses_the_lease_at_once():
    log = SharedLog()
    one, two = log.book("r1"), log.book("r2")
    assert await one.cover(DEVICE, "gw-a", 1)
    log.now += GRACE_S  # r2 saw no renewal for the grace; r1 renews late, after r2 claims
    claim = asyncio.create_task(two.cover(DEVICE, "gw-a2", 2))
    await asyncio.sleep(0)  # r2's claim is in the log first
    assert not await one.cover(DEVICE, "gw-a", 2)
    assert await claim
    assert one.size == 0 and not one.valid(DEVICE, "gw-a", 1)


def test_a_lease_record_reads_back_as_written():
    lease = Lease(DEVICE, 7, "gw-a", "r1", 42, (("gw-z", 10),), released=True)
    assert Lease.decode(lease.encode()) == lease
    assert lease.key() == b"acme/acme-001"
    assert lease.follows(Lease(DEVICE, 6, "gw-z", "r2")) and lease.follows(None)
    assert not lease.follows(lease)


async def test_a_lease_that_cannot_be_written_is_not_held_and_the_device_is_looked_at_again():
    async def broken(_lease: Lease) -> asyncio.Future[None]:
        raise RuntimeError("broker unreachable")

    woken: list[tuple[str, str]] = []
    owners = OwnerBook(GRACE_S, "r1", broken, lambda _d: 0)
    owners.on_wake = woken.append
    assert not await owners.cover(DEVICE, "gw-a", 1)
    assert owners.size == 0 and not owners.valid(DEVICE, "gw-a", 1)
    await asyncio.sleep(1.1)  # nothing else would wake the device's streams
    assert woken == [DEVICE]
