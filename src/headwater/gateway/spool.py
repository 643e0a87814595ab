"""The gateway's durable outbox: messages wait here until the ingest service answers OK.

SQLite in WAL mode, one file per gateway. A message is written (with its message id and
per-device sequence number) before anyone tries to send it, and deleted only after its
OK, so restarts of the gateway and outages of the link or the cloud lose nothing. The
spool is bounded by bytes and by age; when full it either refuses new messages or drops
the oldest, and every drop is counted in the file itself (it survives restarts too).
A message the service rejects for good moves to the ``rejected`` table with the reason,
instead of being retried forever.

Blocking calls: each method is one short transaction. The async client runs them in a
worker thread; a lock serializes them (one connection, shared by threads).
"""

from __future__ import annotations

import contextlib
import fcntl
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from headwater.gateway.ids import uuid7
from headwater.proto.device.v1 import device_message_pb2

WhenFull = Literal["refuse", "drop_oldest"]
ENDPOINTS = ("telemetry", "alarms")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS outbox (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    message_id TEXT NOT NULL UNIQUE,
    endpoint TEXT NOT NULL,
    envelope BLOB NOT NULL,
    enqueued_ms INTEGER NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    not_before_ms INTEGER NOT NULL DEFAULT 0
);
-- The sender walks an endpoint's messages in order (skipping the few not yet due);
-- an index led by not_before_ms would make every frame sort the whole backlog.
CREATE INDEX IF NOT EXISTS outbox_order ON outbox (endpoint, seq);
CREATE INDEX IF NOT EXISTS outbox_due ON outbox (endpoint, not_before_ms);
CREATE INDEX IF NOT EXISTS outbox_age ON outbox (enqueued_ms);
CREATE TABLE IF NOT EXISTS device_sequence (
    device_id TEXT PRIMARY KEY,
    last INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS rejected (
    message_id TEXT PRIMARY KEY,
    endpoint TEXT NOT NULL,
    envelope BLOB NOT NULL,
    code TEXT NOT NULL,
    reason TEXT NOT NULL,
    detail TEXT NOT NULL,
    rejected_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS counters (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
"""


class SpoolFullError(Exception):
    """The spool is full and refuses new messages, or the message outsizes the spool.

    Nothing was written; the caller decides what to do.
    """


class SpoolLockedError(Exception):
    """Another process has this spool open: two senders would send every message twice."""


@dataclass(frozen=True)
class SpoolLimits:
    """How much a spool may hold, and what happens when it is full."""

    #: Bytes of envelopes waiting to be sent.
    max_bytes: int = 256 * 1024 * 1024
    #: Messages older than this are dropped (counted as ``expired``); 0 keeps them forever.
    max_age_s: float = 7 * 24 * 3600
    #: "refuse": ``enqueue`` raises SpoolFullError; "drop_oldest": the oldest make room.
    when_full: WhenFull = "drop_oldest"


@dataclass(frozen=True)
class NewMessage:
    """A device reading to spool; the spool assigns its message id and sequence."""

    device_id: str
    content_type: str
    payload: bytes
    #: When the device produced it (ms since the epoch); default: when it is spooled.
    device_time_ms: int | None = None
    attributes: Mapping[str, str] | None = None


@dataclass(frozen=True)
class Pending:
    """A spooled message due for sending."""

    seq: int
    message_id: str
    endpoint: str
    envelope: bytes
    attempts: int


@dataclass(frozen=True)
class Rejected:
    """A message the ingest service refused for good, and why."""

    message_id: str
    endpoint: str
    envelope: bytes
    code: str
    reason: str
    detail: str


@dataclass(frozen=True)
class SpoolStats:
    """Depth, size, age of the oldest message, and what happened so far (all time)."""

    depth: int
    bytes: int
    oldest_age_s: float
    counters: Mapping[str, int]


class Spool:
    """A durable, bounded outbox of device messages (see the module docstring)."""

    def __init__(
        self,
        path: str | Path,
        limits: SpoolLimits | None = None,
        synchronous: Literal["FULL", "NORMAL"] = "FULL",
    ) -> None:
        """Open (or create) the spool at ``path``.

        Args:
            path: the SQLite file; a ``.lock`` file next to it keeps other processes out.
            limits: bytes, age and the policy when full.
            synchronous: "FULL" survives power loss (an fsync per commit); "NORMAL" survives
                process crashes only, and is faster.
        """
        self.path = Path(path)
        self.limits = limits or SpoolLimits()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock_file = open(self.path.with_suffix(self.path.suffix + ".lock"), "w")  # noqa: SIM115
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            self._lock_file.close()
            raise SpoolLockedError(
                f"spool {self.path} is open in another process; run one sender per spool"
            ) from exc
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(f"PRAGMA synchronous={synchronous}")
        self._db.executescript(_SCHEMA)
        self._mutex = threading.Lock()
        row = self._db.execute("SELECT COALESCE(SUM(LENGTH(envelope)), 0) FROM outbox").fetchone()
        self._bytes = int(row[0])

    def close(self) -> None:
        """Close the file and release the lock (idempotent)."""
        with self._mutex:
            if self._lock_file.closed:
                return
            self._db.close()
            self._lock_file.close()

    def __enter__(self) -> Spool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- writing ----------------------------------------------------------------------

    def enqueue(
        self,
        endpoint: str,
        device_id: str,
        content_type: str,
        payload: bytes,
        device_time_ms: int | None = None,
        attributes: Mapping[str, str] | None = None,
    ) -> device_message_pb2.DeviceMessage:
        """Spool a new device message; return it, with the id and sequence it was given.

        The message id (UUIDv7) and the device's next sequence number are assigned here,
        in the same transaction that stores the message, so a resend after a restart
        carries the same id and sequence.
        """
        new = NewMessage(device_id, content_type, payload, device_time_ms, attributes)
        return self.enqueue_many(endpoint, [new])[0]

    def enqueue_many(
        self, endpoint: str, messages: Iterable[NewMessage]
    ) -> list[device_message_pb2.DeviceMessage]:
        """Spool several messages in one transaction (one fsync): all or none.

        What :meth:`enqueue` does, for gateways with high rates: a commit per message
        costs a disk flush each (docs/benchmarks.md, gateway spool).
        """
        now = _now_ms()
        spooled = []
        with self._refusals_counted(), self._mutex, self._db:
            self._db.execute("BEGIN IMMEDIATE")
            self._expire(now)
            for new in messages:
                (sequence,) = self._db.execute(
                    "INSERT INTO device_sequence (device_id, last) VALUES (?, 1) "
                    "ON CONFLICT (device_id) DO UPDATE SET last = last + 1 RETURNING last",
                    (new.device_id,),
                ).fetchone()
                msg = device_message_pb2.DeviceMessage(
                    message_id=uuid7(now),
                    device_id=new.device_id,
                    sequence=sequence,
                    content_type=new.content_type,
                    payload=new.payload,
                    attributes=dict(new.attributes or {}),
                )
                msg.device_time.FromMilliseconds(
                    now if new.device_time_ms is None else new.device_time_ms
                )
                self._insert(endpoint, msg.message_id, msg.SerializeToString(), now)
                spooled.append(msg)
        return spooled

    def enqueue_message(self, endpoint: str, message: device_message_pb2.DeviceMessage) -> bool:
        """Spool a message that already has its id and sequence; False if it is pending.

        For resends and replays from another store: nothing is assigned, and a message
        whose id is still waiting in the spool is not spooled twice.
        """
        now = _now_ms()
        with self._refusals_counted(), self._mutex, self._db:
            self._db.execute("BEGIN IMMEDIATE")
            self._expire(now)
            pending = self._db.execute(
                "SELECT 1 FROM outbox WHERE message_id = ?", (message.message_id,)
            ).fetchone()
            if pending:
                return False
            self._insert(endpoint, message.message_id, message.SerializeToString(), now)
        return True

    def _insert(self, endpoint: str, message_id: str, envelope: bytes, now: int) -> None:
        if endpoint not in ENDPOINTS:
            raise ValueError(f"unknown endpoint {endpoint!r}; one of {', '.join(ENDPOINTS)}")
        size = len(envelope)
        if size > self.limits.max_bytes:
            raise SpoolFullError(
                f"message of {size} bytes is larger than the whole spool "
                f"({self.limits.max_bytes} bytes)"
            )
        if self._bytes + size > self.limits.max_bytes:
            if self.limits.when_full == "refuse":
                raise SpoolFullError(
                    f"spool {self.path} is full ({self._bytes} of {self.limits.max_bytes} "
                    "bytes); the link or the ingest service has been down for a while"
                )
            self._drop_oldest(self._bytes + size - self.limits.max_bytes)
        self._db.execute(
            "INSERT INTO outbox (message_id, endpoint, envelope, enqueued_ms) VALUES (?, ?, ?, ?)",
            (message_id, endpoint, envelope, now),
        )
        self._bytes += size

    @contextlib.contextmanager
    def _refusals_counted(self) -> Iterator[None]:
        # The refused write is rolled back; its count is committed on its own.
        try:
            yield
        except SpoolFullError:
            with self._mutex, self._db:
                self._count("refused")
            raise

    def _expire(self, now: int) -> None:
        if not self.limits.max_age_s:
            return
        cutoff = now - int(self.limits.max_age_s * 1000)
        rows = self._db.execute(
            "DELETE FROM outbox WHERE enqueued_ms < ? RETURNING LENGTH(envelope)", (cutoff,)
        ).fetchall()
        if rows:
            self._bytes -= sum(r[0] for r in rows)
            self._count("expired", len(rows))

    def _drop_oldest(self, need: int) -> None:
        freed, dropped = 0, 0
        for seq, size in self._db.execute(
            "SELECT seq, LENGTH(envelope) FROM outbox ORDER BY seq"
        ).fetchall():
            if freed >= need:
                break
            self._db.execute("DELETE FROM outbox WHERE seq = ?", (seq,))
            freed, dropped = freed + size, dropped + 1
        self._bytes -= freed
        self._count("dropped_oldest", dropped)

    def _count(self, name: str, n: int = 1) -> None:
        self._db.execute(
            "INSERT INTO counters (name, value) VALUES (?, ?) "
            "ON CONFLICT (name) DO UPDATE SET value = value + excluded.value",
            (name, n),
        )

    # --- the sender's side --------------------------------------------------------------

    def due(self, endpoint: str, limit: int, after_seq: int = 0) -> list[Pending]:
        """Return up to ``limit`` messages of ``endpoint`` due now, oldest first.

        Only those past ``after_seq``: the sender's cursor, which skips what it has in flight.
        """
        with self._mutex:
            rows = self._db.execute(
                "SELECT seq, message_id, endpoint, envelope, attempts FROM outbox "
                "WHERE endpoint = ? AND seq > ? AND not_before_ms <= ? ORDER BY seq LIMIT ?",
                (endpoint, after_seq, _now_ms(), limit),
            ).fetchall()
        return [Pending(*row) for row in rows]

    def next_due_in_s(self, endpoint: str) -> float | None:
        """Return seconds until the next message of ``endpoint`` is due; None if none."""
        with self._mutex:
            (not_before,) = self._db.execute(
                "SELECT MIN(not_before_ms) FROM outbox WHERE endpoint = ?", (endpoint,)
            ).fetchone()
        return None if not_before is None else max(0.0, (not_before - _now_ms()) / 1000)

    def delivered(self, seqs: list[int]) -> None:
        """Delete messages the ingest service answered OK for."""
        if not seqs:
            return
        with self._mutex, self._db:
            self._db.execute("BEGIN IMMEDIATE")
            rows = self._db.execute(
                f"DELETE FROM outbox WHERE seq IN ({','.join('?' * len(seqs))}) "
                "RETURNING LENGTH(envelope)",
                seqs,
            ).fetchall()
            self._bytes -= sum(r[0] for r in rows)
            self._count("delivered", len(rows))

    def retry_later(self, seqs: list[int], delay_s: float) -> None:
        """Keep messages for another attempt, not before ``delay_s`` from now."""
        if not seqs:
            return
        with self._mutex, self._db:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.execute(
                "UPDATE outbox SET attempts = attempts + 1, not_before_ms = ? "
                f"WHERE seq IN ({','.join('?' * len(seqs))})",
                [_now_ms() + int(delay_s * 1000), *seqs],
            )
            self._count("retried", len(seqs))

    def reject(self, seq: int, code: str, reason: str, detail: str) -> None:
        """Move a message the service refused for good to the rejected table."""
        with self._mutex, self._db:
            self._db.execute("BEGIN IMMEDIATE")
            row = self._db.execute(
                "DELETE FROM outbox WHERE seq = ? RETURNING message_id, endpoint, envelope",
                (seq,),
            ).fetchone()
            if row is None:
                return
            self._db.execute(
                "INSERT OR REPLACE INTO rejected VALUES (?, ?, ?, ?, ?, ?, ?)",
                (*row, code, reason, detail, _now_ms()),
            )
            self._bytes -= len(row[2])
            self._count("rejected")

    # --- reading --------------------------------------------------------------------

    def rejected(self) -> list[Rejected]:
        """Return the messages the service refused for good, oldest first."""
        with self._mutex:
            rows = self._db.execute(
                "SELECT message_id, endpoint, envelope, code, reason, detail FROM rejected "
                "ORDER BY rejected_ms"
            ).fetchall()
        return [Rejected(*row) for row in rows]

    def stats(self) -> SpoolStats:
        """Return depth, bytes, the oldest message's age and the counters."""
        with self._mutex:
            depth, oldest = self._db.execute(
                "SELECT COUNT(*), MIN(enqueued_ms) FROM outbox"
            ).fetchone()
            counters = dict(self._db.execute("SELECT name, value FROM counters").fetchall())
        age = 0.0 if oldest is None else (_now_ms() - oldest) / 1000
        return SpoolStats(depth, self._bytes, age, counters)


def _now_ms() -> int:
    return int(time.time() * 1000)
