"""Which gateway receives a device's commands: one owner per device, on this replica.

Several gateways may be bound to one device (overlapping patterns in the tokens file, for
redundant gateways), but a command is an action on a machine: it must run on one of them
only. So each device has one owner at a time, and only the owner's streams are sent the
device's commands:

- the **first** gateway whose stream serves the device when a command is due takes it;
- the owner **keeps** it while any of its command streams is open, and across a
  reconnect that comes within the grace period (a restart, a blip): the device's order
  stays on one gateway's spool;
- when the owner's last stream has been closed for ``grace_s``, the device is free and
  the next bound gateway's stream takes it (**failover**); the owner coming back later
  does not take it back (the new owner keeps it for the same reasons).

Per replica: the book of owners is in this replica's memory, like the book of commands.
docs/commands.md says what that means with several replicas.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from .book import DeviceKey


@dataclass
class Owner:
    """The gateway a device's commands go to, and since when it has no stream open."""

    gateway_id: str
    #: time.monotonic() when the owner's last stream closed; None while one is open.
    lost_at: float | None = None


class OwnerBook:
    """The owner of each device with commands (see the module docstring)."""

    def __init__(
        self,
        grace_s: float,
        on_change: Callable[[DeviceKey, str, str], None] = lambda _d, _old, _new: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.grace_s = grace_s
        self._owners: dict[DeviceKey, Owner] = {}
        self._devices_of: dict[str, set[DeviceKey]] = {}
        #: Called with (device, previous owner or "", new owner) whenever a device is taken.
        self._on_change = on_change
        self._clock = clock

    @property
    def size(self) -> int:
        """Devices with an owner."""
        return len(self._owners)

    def owner(self, device: DeviceKey) -> str | None:
        """The gateway id owning ``device`` (connected or within its grace), if any."""
        found = self._owners.get(device)
        return None if found is None else found.gateway_id

    def claim(self, device: DeviceKey, gateway_id: str) -> bool:
        """True if ``gateway_id`` may be sent ``device``'s commands (it owns it now)."""
        current = self._owners.get(device)
        if current is not None and current.gateway_id == gateway_id:
            current.lost_at = None
            return True
        if current is not None and (
            current.lost_at is None or self._clock() - current.lost_at < self.grace_s
        ):
            return False
        previous = "" if current is None else current.gateway_id
        if current is not None:
            self._devices_of[previous].discard(device)
        self._owners[device] = Owner(gateway_id)
        self._devices_of.setdefault(gateway_id, set()).add(device)
        self._on_change(device, previous, gateway_id)
        return True

    def connected(self, gateway_id: str) -> None:
        """A stream of ``gateway_id`` opened: it keeps the devices it owns."""
        for device in self._devices_of.get(gateway_id, ()):
            self._owners[device].lost_at = None

    def disconnected(self, gateway_id: str) -> list[DeviceKey]:
        """The last stream of ``gateway_id`` closed: its devices are free after the grace.

        Returns those devices (to look at again once the grace has passed).
        """
        now = self._clock()
        devices = list(self._devices_of.get(gateway_id, ()))
        for device in devices:
            self._owners[device].lost_at = now
        return devices
