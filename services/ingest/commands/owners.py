"""Which gateway receives a device's commands: one owner per device, for the whole service.

Several gateways may be bound to one device (overlapping patterns in the tokens file, for
redundant gateways), and their command streams may be on different replicas. A command
is an action on a machine: it must run on one of them only. So each device has at most
one lease (leases.py), agreed by every replica through command-owners.v1, and only the
replica holding it sends the device's new commands, to the lease's gateway:

- **claim**: a replica with a stream of a bound gateway claims a device that has no
  lease, whose lease its own gateway released, or whose lease was not renewed for the
  grace period (measured from when this replica read its last record). The claim counts
  once this replica has read it back accepted (first in the log on its version);
- **renew**: the holder renews every quarter of the grace while the owner's stream is
  open here, and before it sends commands beyond the lease's ``sent_through`` (written
  first, so a failover knows what may be in the owner's spool);
- **release**: as the owner's last stream here closes (and when the replica stops);
  the owner may take the lease again at once from any replica, another gateway only after
  the grace (a restart, a blip keep the device on one spool);
- **fencing**: the holder sends only while the lease is its own in the log (a record of
  another replica accepted ends it at once) and within three quarters of the grace after
  it *wrote* its last accepted record; anyone else claims only a grace after *reading* it,
  which is later. So no two replicas send a device's new commands at the same time, with
  clocks that need to agree on the length of a second only.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from .book import DeviceKey
from .leases import NOTHING_SENT, Lease

log = logging.getLogger(__name__)
#: Of the grace: how long after writing a record the holder may rely on it.
VALID_FRACTION = 0.75
#: How long a write waits to be read back before it counts as lost.
READ_BACK_S = 10.0


@dataclass
class Held:
    """A lease this replica holds: its last accepted record, and until when it may send."""

    lease: Lease
    written_at: float
    valid_until: float


class OwnerBook:
    """The leases of every device, and those this replica holds (see the module docstring)."""

    def __init__(
        self,
        grace_s: float,
        replica: str,
        write: Callable[[Lease], Awaitable[asyncio.Future[Any]]],
        oldest_waiting: Callable[[DeviceKey], int | None],
        on_change: Callable[[DeviceKey, str, str], None] = lambda _d, _old, _new: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.grace_s = grace_s
        #: This process's identity in the leases: a restarted replica holds none.
        self.replica = replica
        self._write = write
        #: The offset of a device's oldest waiting command: older reservations are dropped.
        self._oldest_waiting = oldest_waiting
        #: Called with (device, previous owner or "", new owner) when this replica takes one.
        self._on_change = on_change
        self._clock = clock
        #: Called with a device whose lease changed, or may be claimed now.
        self.on_wake: Callable[[DeviceKey], None] = lambda _device: None
        self._leases: dict[DeviceKey, Lease] = {}
        self._read_at: dict[DeviceKey, float] = {}
        self._held: dict[DeviceKey, Held] = {}
        self._locks: dict[DeviceKey, asyncio.Lock] = {}
        #: Records written and not read back yet: (version, accepted?).
        self._pending: dict[DeviceKey, tuple[int, asyncio.Future[bool]]] = {}
        #: Command streams open here, per gateway.
        self._streams: Counter[str] = Counter()
        self._timers: dict[DeviceKey, asyncio.TimerHandle] = {}
        #: Set when the replica stops: it claims nothing more.
        self._stopping = False
        #: Releases under way (referenced until done).
        self._releasing: set[asyncio.Task[None]] = set()

    @property
    def size(self) -> int:
        """Devices whose lease this replica holds."""
        return len(self._held)

    def owner(self, device: DeviceKey) -> str | None:
        """The gateway of ``device``'s lease as last read (held, released or lapsed), if any."""
        lease = self._leases.get(device)
        return None if lease is None else lease.gateway_id

    def gateway_of(self, device: DeviceKey, offset: int) -> str | None:
        """The gateway the command at ``offset`` is reserved to; None: not sent to any yet."""
        held = self._held.get(device)
        lease = held.lease if held is not None else self._leases.get(device)
        return None if lease is None else lease.gateway_of(offset)

    def valid(self, device: DeviceKey, gateway_id: str, offset: int) -> bool:
        """True if this replica may send ``gateway_id`` the new command at ``offset`` now."""
        held = self._held.get(device)
        return (
            held is not None
            and held.lease.gateway_id == gateway_id
            and offset <= held.lease.sent_through
            and self._clock() < held.valid_until
        )

    def connected(self, gateway_id: str) -> None:
        """A command stream of ``gateway_id`` opened here."""
        self._streams[gateway_id] += 1

    def disconnected(self, gateway_id: str) -> None:
        """A command stream of ``gateway_id`` closed here: if its last, release its leases."""
        self._streams[gateway_id] -= 1
        if self._streams[gateway_id] > 0:
            return
        del self._streams[gateway_id]
        # At once, not at the next renewal: the grace of a failover counts from the release.
        for device, held in list(self._held.items()):
            if held.lease.gateway_id == gateway_id:
                task = asyncio.get_running_loop().create_task(self._release(device))
                self._releasing.add(task)
                task.add_done_callback(self._releasing.discard)

    def read(self, lease: Lease) -> None:
        """Take a record of command-owners.v1 into account, in log order."""
        device = lease.device
        accepted = lease.follows(self._leases.get(device))
        pending = self._pending.get(device)
        if pending is not None and not pending[1].done():
            version, done = pending
            if lease.replica == self.replica and lease.version == version:
                done.set_result(accepted)
            elif accepted and lease.version >= version:
                done.set_result(False)
        if not accepted:
            return
        self._leases[device] = lease
        self._read_at[device] = self._clock()
        if device in self._held and lease.replica != self.replica:
            del self._held[device]  # fenced: another replica's record came first
            log.warning(
                "device commands lease lost to another replica",
                extra={"tenant": device[0], "device_id": device[1], "replica": lease.replica},
            )
        self.on_wake(device)

    async def cover(self, device: DeviceKey, gateway_id: str, through: int) -> bool:
        """True once this replica holds ``device``'s lease for ``gateway_id`` up to ``through``.

        The lease is claimed if it may be, and extended over the commands up to offset
        ``through`` before they are sent; False if another gateway or replica has it.
        """
        async with self._lock(device):
            held = self._held.get(device)
            if self._stopping:
                return False
            if held is None:
                if not self._may_claim(device, gateway_id) or not await self._claim(
                    device, gateway_id
                ):
                    return False
                held = self._held[device]
            if held.lease.gateway_id != gateway_id:
                return False
            if held.lease.sent_through < through or self._clock() >= held.valid_until:
                extended = dataclasses.replace(
                    held.lease,
                    version=held.lease.version + 1,
                    sent_through=max(through, held.lease.sent_through),
                )
                if not await self._put(extended):
                    return False
            return self.valid(device, gateway_id, through)

    async def keep_forever(self) -> None:
        """Renew the leases whose owner has a stream here; release the others."""
        while True:
            await asyncio.sleep(self.grace_s / 4)
            await asyncio.gather(*(self._keep(device) for device in list(self._held)))

    async def release_all(self) -> None:
        """Release every lease held here (the replica stops: its gateways reconnect elsewhere)."""
        self._stopping = True
        await asyncio.gather(*(self._release(device) for device in list(self._held)))

    def _lock(self, device: DeviceKey) -> asyncio.Lock:
        return self._locks.setdefault(device, asyncio.Lock())

    def _may_claim(self, device: DeviceKey, gateway_id: str) -> bool:
        current = self._leases.get(device)
        if current is None or (current.released and current.gateway_id == gateway_id):
            return True
        lapses_at = self._read_at[device] + self.grace_s
        if self._clock() >= lapses_at:
            return True
        if device not in self._timers:  # look again when it lapses
            self._timers[device] = asyncio.get_running_loop().call_later(
                lapses_at - self._clock() + 0.01, self._lapsed, device
            )
        return False

    def _lapsed(self, device: DeviceKey) -> None:
        del self._timers[device]
        self.on_wake(device)

    async def _claim(self, device: DeviceKey, gateway_id: str) -> bool:
        current = self._leases.get(device)
        previous = "" if current is None else current.gateway_id
        reserved = () if current is None else current.reserved
        sent_through = NOTHING_SENT if current is None else current.sent_through
        if previous and previous != gateway_id and sent_through > _last_through(reserved):
            reserved += ((previous, sent_through),)  # may be in the old owner's spool
        oldest = self._oldest_waiting(device)
        lease = Lease(
            device,
            1 if current is None else current.version + 1,
            gateway_id,
            self.replica,
            # A claim never extends it: only the holder's renewals do (leases.py says why).
            sent_through,
            tuple(r for r in reserved if oldest is not None and r[1] >= oldest),
        )
        if not await self._put(lease):
            return False
        if previous != gateway_id:
            self._on_change(device, previous, gateway_id)
        return True

    async def _keep(self, device: DeviceKey) -> None:
        held = self._held.get(device)
        if held is None:
            return
        if held.lease.gateway_id not in self._streams:
            await self._release(device)
            return
        async with self._lock(device):
            held = self._held.get(device)
            if held is not None and self._clock() - held.written_at >= self.grace_s / 8:
                await self._put(dataclasses.replace(held.lease, version=held.lease.version + 1))

    async def _release(self, device: DeviceKey) -> None:
        async with self._lock(device):
            held = self._held.get(device)
            if held is None or (held.lease.gateway_id in self._streams and not self._stopping):
                return  # its gateway is back meanwhile: it keeps the lease
            del self._held[device]  # nothing is sent from here on
            released = dataclasses.replace(
                held.lease, version=held.lease.version + 1, released=True
            )
            await self._put(released)

    async def _put(self, lease: Lease) -> bool:
        """Write ``lease`` and wait to read it back; True if it was accepted (held now)."""
        device = lease.device
        written_at = self._clock()
        accepted: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._pending[device] = (lease.version, accepted)
        try:
            await (await self._write(lease))
            won = await asyncio.wait_for(accepted, READ_BACK_S)
        except Exception as exc:  # not written or not read back: not relied upon
            log.warning(
                "cannot write a device commands lease",
                extra={"tenant": device[0], "device_id": device[1], "error": repr(exc)},
            )
            won = False
            # Nothing else may wake the device's streams: look again in a moment.
            asyncio.get_running_loop().call_later(1.0, self.on_wake, device)
        finally:
            del self._pending[device]
        if won and not lease.released:
            valid_until = written_at + VALID_FRACTION * self.grace_s
            self._held[device] = Held(lease, written_at, valid_until)
        else:
            self._held.pop(device, None)
        return won


def _last_through(reserved: tuple[tuple[str, int], ...]) -> int:
    return reserved[-1][1] if reserved else NOTHING_SENT
