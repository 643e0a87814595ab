"""A device's lease on command-owners.v1: which gateway owns its commands, for every replica.

One record per change, keyed ``<tenant>/<device_id>`` on a compacted topic that every
replica reads in full (the feed). The log's order is the arbiter: a record is **accepted**
when its ``version`` is one more than the accepted record before it, so of two replicas
that write a lease on the same version, the first one in the log wins and the other's
record is ignored by every reader alike (compare-and-set, with Kafka as the only store).
The version is the fencing token: a replica whose record was not accepted has lost.

What a lease says:

- ``gateway_id``: the owner, the only gateway sent the device's new commands;
- ``replica``: the replica process holding the lease, the only one that sends them (it
  renews the lease while the owner's stream is open there, and releases it when it closes);
- ``sent_through``: the commands.v1 offset up to which the owner may have been sent the
  device's commands (written *before* they are sent): those may be in its spool;
- ``reserved``: the same for earlier owners, ``(gateway, through)`` in offset order. A
  command reserved to a gateway is only ever sent to that gateway (it may be stored there,
  its acknowledgement lost), so failover never runs a command twice;
- ``released``: the holder let it go (the owner's stream closed).

Compaction keeps the last record of a key, which may be a record that was not accepted
(the loser of two claims). A reader that starts after compaction accepts the first record
it reads, whatever its version. That is safe because a claim never extends
``sent_through`` (only renewals by the replica that holds the lease do): a losing claim
carries the same reservations as the winner, and the versions that follow line up. A
refused renewal kept that way reserves commands its replica did not send (it sends only
what an accepted record covers): they wait for that gateway or expire, never run twice.
"""

from __future__ import annotations

from dataclasses import dataclass

from headwater.proto.commands.v1.command_lease_pb2 import CommandLease
from headwater.topics import scoped_key

from .book import DeviceKey

#: sent_through of a device none of whose commands was sent yet.
NOTHING_SENT = -1


@dataclass(frozen=True)
class Lease:
    """One record of command-owners.v1 (see the module docstring)."""

    device: DeviceKey
    version: int
    gateway_id: str
    replica: str
    sent_through: int = NOTHING_SENT
    reserved: tuple[tuple[str, int], ...] = ()
    released: bool = False

    def follows(self, current: Lease | None) -> bool:
        """True if this record is accepted after ``current`` (None: the first one read)."""
        return current is None or self.version == current.version + 1

    def gateway_of(self, offset: int) -> str | None:
        """The gateway the command at ``offset`` may have been sent to; None: not sent yet."""
        for gateway_id, through in self.reserved:
            if offset <= through:
                return gateway_id
        return self.gateway_id if offset <= self.sent_through else None

    def key(self) -> bytes:
        """The record key: the device's, as on the command topics."""
        return scoped_key(*self.device).encode()

    def encode(self) -> bytes:
        """The record value: a ``headwater.commands.v1.CommandLease``."""
        return CommandLease(
            tenant=self.device[0],
            device_id=self.device[1],
            version=self.version,
            gateway_id=self.gateway_id,
            replica=self.replica,
            sent_through=self.sent_through,
            reserved=[CommandLease.Reservation(gateway_id=g, through=t) for g, t in self.reserved],
            released=self.released,
        ).SerializeToString()

    @classmethod
    def decode(cls, value: bytes) -> Lease:
        """Read a record value; DecodeError if it is not a CommandLease."""
        record = CommandLease.FromString(value)
        return cls(
            (record.tenant, record.device_id),
            record.version,
            record.gateway_id,
            record.replica,
            record.sent_through,
            tuple((r.gateway_id, r.through) for r in record.reserved),
            record.released,
        )
