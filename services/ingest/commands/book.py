"""The commands waiting for delivery, in memory: per device, in log order.

Every replica keeps the whole book (it reads all of commands.v1 and command-status.v1),
so whichever replica holds a gateway's stream can deliver its commands at once, and a
replica that dies loses nothing: the book is rebuilt from the topics. A command leaves
the book when it is DELIVERED (acknowledged on this replica, or a DELIVERED or final
status read from the topic) or EXPIRED; its id is remembered (a bounded number of them)
so that the same id sent again is not delivered again.

Runs on the event loop only; no locks.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from headwater.commands import model
from headwater.proto.commands.v1.command_pb2 import Command
from headwater.proto.commands.v1.command_status_pb2 import CommandState, CommandStatus

#: (tenant, device_id)
DeviceKey = tuple[str, str]
#: (tenant, device_id, command_id): command ids are the sender's, unique per device.
CommandKey = tuple[str, str, str]


@dataclass
class Entry:
    """One command waiting for delivery."""

    command: Command
    key: CommandKey
    expires_ms: int
    created_ms: int
    #: Its offset in commands.v1 (a device's commands are in one partition): the order
    #: the leases' reservations are stated in.
    offset: int
    #: The gateway it was sent to, once sent: it may be in that gateway's spool (stored,
    #: its acknowledgement lost with the stream), so no other gateway is ever sent it.
    sent_to: str = ""


class CommandBook:
    """Commands waiting for delivery (see the module docstring)."""

    def __init__(self, remembered_ids: int = 1_000_000) -> None:
        self._pending: dict[str, dict[str, OrderedDict[str, Entry]]] = {}
        self._done: OrderedDict[CommandKey, int] = OrderedDict()
        self._remembered = remembered_ids
        self._expiries: list[tuple[int, CommandKey]] = []
        #: Called with the device key whenever a command for it is added.
        self.on_added: Callable[[DeviceKey], None] = lambda _key: None
        self.size = 0

    def add(self, command: Command, offset: int) -> bool:
        """Add a command read from commands.v1 at ``offset``; False for a repeat of a known id."""
        key = (command.tenant, command.device_id, command.command_id)
        device = self._pending.setdefault(command.tenant, {}).setdefault(
            command.device_id, OrderedDict()
        )
        if key in self._done or command.command_id in device:
            return False
        entry = Entry(
            command,
            key,
            command.expires_time.ToMilliseconds(),
            command.created_time.ToMilliseconds(),
            offset,
        )
        device[command.command_id] = entry
        self.size += 1
        heapq.heappush(self._expiries, (entry.expires_ms, key))
        self.on_added((command.tenant, command.device_id))
        return True

    def apply(self, status: CommandStatus) -> None:
        """Take a status read from command-status.v1 into account."""
        if model.rank(status.state) >= model.rank(CommandState.COMMAND_STATE_DELIVERED):
            self.finish((status.tenant, status.device_id, status.command_id), status.state)

    def finish(self, key: CommandKey, state: int) -> Entry | None:
        """Take a command out of the book (delivered or final); return it if it was in."""
        tenant, device_id, command_id = key
        device = self._pending.get(tenant, {}).get(device_id)
        entry = device.pop(command_id, None) if device is not None else None
        if entry is not None:
            self.size -= 1
            if not device:
                del self._pending[tenant][device_id]
        if model.rank(state) > model.rank(self._done.get(key, 0)):
            self._done[key] = state
            self._done.move_to_end(key)
            while len(self._done) > self._remembered:
                self._done.popitem(last=False)
        return entry

    def get(self, key: CommandKey) -> Entry | None:
        """The waiting command of ``key``, if any."""
        device = self._pending.get(key[0], {}).get(key[1])
        return None if device is None else device.get(key[2])

    def known(self, key: CommandKey) -> bool:
        """True if the command is waiting or remembered as delivered or finished."""
        return key in self._done or self.get(key) is not None

    def waiting(self, device: DeviceKey) -> list[Entry]:
        """The device's waiting commands, oldest first (a copy: safe across awaits)."""
        entries = self._pending.get(device[0], {}).get(device[1])
        return [] if entries is None else list(entries.values())

    def oldest_offset(self, device: DeviceKey) -> int | None:
        """The offset of the device's oldest waiting command, if any."""
        entries = self._pending.get(device[0], {}).get(device[1])
        return next((e.offset for e in entries.values()), None) if entries else None

    def devices(self, tenant: str) -> Iterator[DeviceKey]:
        """The tenant's devices with commands waiting."""
        for device_id in list(self._pending.get(tenant, {})):
            yield (tenant, device_id)

    def take_expired(self, now_ms: int) -> list[Entry]:
        """Remove and return the waiting commands whose expiry has passed."""
        gone = []
        while self._expiries and self._expiries[0][0] <= now_ms:
            _, key = heapq.heappop(self._expiries)
            entry = self.get(key)
            if entry is not None:
                self.finish(key, CommandState.COMMAND_STATE_EXPIRED)
                gone.append(entry)
        return gone
