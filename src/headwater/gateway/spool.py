"""The gateway's durable outbox: messages wait here until the ingest service answers OK.

SQLite in WAL mode, one file per gateway. A message is written (with its message id and
per-device sequence number) before anyone tries to send it, and deleted only after its
OK, so restarts of the gateway and outages of the link or the cloud lose nothing. The
spool is bounded by bytes and by age; when full it either refuses new messages or drops
the oldest, and every drop is counted in the file itself (it survives restarts too) and
reported to the caller. A message the service rejects for good moves to the ``rejected``
table with the reason, instead of being retried forever.

Blocking calls: each method is one short transaction. The async client runs them in a
worker thread; a lock serializes them (one connection, shared by threads).
"""

from __future__ import annotations

import contextlib
import fcntl
import sqlite3
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Literal

from headwater.gateway.errors import SpoolFullError, SpoolLockedError
from headwater.gateway.records import (
    ENDPOINTS,
    DueMessage,
    Enqueued,
    NewMessage,
    Rejected,
    SpoolLimits,
    SpoolStats,
    WhenFull,
)
from headwater.gateway.schema import upgrade
from headwater.ids import uuid7
from headwater.proto.device.v1 import device_message_pb2

__all__ = [
    "ENDPOINTS",
    "DueMessage",
    "Enqueued",
    "NewMessage",
    "Rejected",
    "Spool",
    "SpoolFullError",
    "SpoolLimits",
    "SpoolLockedError",
    "SpoolStats",
]

_COLUMNS = "seq, message_id, endpoint, envelope, attempts"


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
            raise SpoolLockedError(self.path) from exc
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._synchronous = synchronous
        self._db.execute(f"PRAGMA synchronous={synchronous}")
        upgrade(self._db)
        self._mutex = threading.Lock()
        # Kept in memory so limits and gauges need no scan of the outbox.
        depth, size = self._db.execute(
            "SELECT COUNT(*), COALESCE(SUM(LENGTH(envelope)), 0) FROM outbox"
        ).fetchone()
        self._depth, self._bytes = int(depth), int(size)

    @property
    def depth(self) -> int:
        """Messages waiting, from memory: no I/O, safe to read on the event loop."""
        return self._depth

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran."""
        return self._lock_file.closed

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
    ) -> Enqueued:
        """Spool a new device message; ``.message`` is it, with its id and sequence.

        The message id (UUIDv7) and the device's next sequence number are assigned here,
        in the same transaction that stores the message, so a resend after a restart
        carries the same id and sequence.

        Raises:
            SpoolFullError: policy ``refuse`` and no room, or the message outsizes the spool.
        """
        new = NewMessage(device_id, content_type, payload, device_time_ms, attributes)
        return self.enqueue_many(endpoint, [new])

    def enqueue_many(
        self, endpoint: str, messages: Iterable[NewMessage], when_full: WhenFull | None = None
    ) -> Enqueued:
        """Spool several messages in one transaction (one fsync): all or none.

        What :meth:`enqueue` does, for gateways with high rates: a commit per message
        costs a disk flush each (docs/benchmarks.md, gateway spool). ``when_full``
        overrides the limits' policy for this call (a source that can wait refuses).
        """
        batch = list(messages)
        enqueued = self.enqueue_if(endpoint, lambda _db: batch, len(batch), when_full)
        return enqueued or Enqueued((), (), 0)

    def enqueue_if(
        self,
        endpoint: str,
        step: Callable[[sqlite3.Connection], list[NewMessage]],
        expected: int = 1,
        when_full: WhenFull | None = None,
    ) -> Enqueued | None:
        """Run ``step`` and spool the messages it returns: one transaction.

        For state kept next to the outbox (the commands table): the state change and the
        messages reporting it are on disk together or not at all. None when ``step``
        returned no messages (nothing spooled). ``expected`` is how many messages a
        refusal (spool full) counts.
        """
        _check_endpoint(endpoint)
        now = _now_ms()
        with self._transaction(expected) as dropped:
            batch = step(self._db)
            if not batch:
                return None
            expired = self._expire(now)
            sequences = self._next_sequences([new.device_id for new in batch])
            spooled = tuple(
                _build(new, uuid7(now), sequence, now)
                for new, sequence in zip(batch, sequences, strict=True)
            )
            rows = [(m.message_id, endpoint, m.SerializeToString(), now) for m in spooled]
            self._insert_all(rows, dropped, when_full or self.limits.when_full)
        return Enqueued(spooled, tuple(dropped), expired)

    def execute(self, sql: str, params: tuple[object, ...] = ()) -> int:
        """Run one write statement in its own transaction (for the commands table).

        Durable as the spool is (``synchronous``): the commands runner records here that a
        handler is about to run. Returns the rows changed.
        """
        with self._mutex, self._db:
            self._db.execute("BEGIN IMMEDIATE")
            return int(self._db.execute(sql, params).rowcount)

    def read(self, sql: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
        """Run one read-only query on the spool file (for the commands table)."""
        with self._mutex:
            return list(self._db.execute(sql, params).fetchall())

    def _next_sequences(self, device_ids: list[str]) -> list[int]:
        """Take the next sequence numbers, in order: one upsert per device, not per message."""
        counts: dict[str, int] = {}
        for device_id in device_ids:
            counts[device_id] = counts.get(device_id, 0) + 1
        following: dict[str, int] = {}
        for device_id, n in counts.items():
            (last,) = self._db.execute(
                "INSERT INTO device_sequence (device_id, last) VALUES (?, ?) "
                "ON CONFLICT (device_id) DO UPDATE SET last = last + excluded.last "
                "RETURNING last",
                (device_id, n),
            ).fetchone()
            following[device_id] = last - n + 1
        sequences = []
        for device_id in device_ids:
            sequences.append(following[device_id])
            following[device_id] += 1
        return sequences

    def enqueue_message(self, endpoint: str, message: device_message_pb2.DeviceMessage) -> Enqueued:
        """Spool a message that already has its id and sequence, as it is.

        For resends and replays from another store: nothing is assigned, and a message
        whose id is still waiting in the spool is not spooled twice (then ``messages`` is
        empty).
        """
        _check_endpoint(endpoint)
        now = _now_ms()
        with self._transaction(1) as dropped:
            expired = self._expire(now)
            pending = self._db.execute(
                "SELECT 1 FROM outbox WHERE message_id = ?", (message.message_id,)
            ).fetchone()
            if not pending:
                row = (message.message_id, endpoint, message.SerializeToString(), now)
                self._insert_all([row], dropped, self.limits.when_full)
        return Enqueued(() if pending else (message,), tuple(dropped), expired)

    @contextlib.contextmanager
    def _transaction(self, messages: int) -> Iterator[list[str]]:
        """One write transaction; yields the list that collects ids dropped for room.

        On any error the transaction and the in-memory totals roll back; a refusal is
        then counted on its own (``refused``, per message).
        """
        try:
            with self._mutex:
                depth, size = self._depth, self._bytes
                try:
                    with self._db:
                        self._db.execute("BEGIN IMMEDIATE")
                        dropped: list[str] = []
                        yield dropped
                except BaseException:
                    self._depth, self._bytes = depth, size
                    raise
        except SpoolFullError:
            with self._mutex, self._db:
                self._count("refused", messages)
            raise

    def _insert_all(
        self, rows: list[tuple[str, str, bytes, int]], dropped: list[str], when_full: WhenFull
    ) -> None:
        """Insert (message_id, endpoint, envelope, enqueued_ms) rows, making room by policy."""
        limit = self._outbox_limit(sum(len(row[2]) for row in rows))
        sizes = [len(row[2]) for row in rows]
        total = sum(sizes)
        for size in sizes:
            if size > limit:
                raise SpoolFullError(self.path, self._bytes, limit, size)
        if self._bytes + total > limit:
            if when_full == "refuse":
                raise SpoolFullError(self.path, self._bytes, limit, total)
            if total > limit:  # the batch pushes out its own first messages: one at a time
                for row in rows:
                    self._insert_all([row], dropped, when_full)
                return
            self._drop_oldest(self._bytes + total - limit, dropped)
        self._db.executemany(
            "INSERT INTO outbox (message_id, endpoint, envelope, enqueued_ms) VALUES (?, ?, ?, ?)",
            rows,
        )
        self._depth += len(rows)
        self._bytes += total

    def _outbox_limit(self, adding: int) -> int:
        """The bytes the outbox may hold: the limit less the commands table's.

        Done commands (kept for their retention, to recognise a redelivered id) give way
        first, oldest finished first; commands waiting to run never do.
        """
        (commands,) = self._db.execute("SELECT total FROM command_bytes").fetchone()
        excess = self._bytes + commands + adding - self.limits.max_bytes
        if excess > 0 and commands:
            commands -= self._drop_done_commands(excess)
        return int(self.limits.max_bytes - commands)

    def _drop_done_commands(self, need: int) -> int:
        freed, count = 0, 0
        while freed < need:
            oldest = self._db.execute(
                "SELECT seq, LENGTH(envelope) FROM commands WHERE done = 1 "
                "ORDER BY finished_ms LIMIT 64"
            ).fetchall()
            if not oldest:
                break
            for seq, size in oldest:
                if freed >= need:
                    break
                self._db.execute("DELETE FROM commands WHERE seq = ?", (seq,))
                freed, count = freed + size, count + 1
        self._count("done_commands_dropped", count)
        return freed

    def _expire(self, now: int) -> int:
        if not self.limits.max_age_s:
            return 0
        cutoff = now - int(self.limits.max_age_s * 1000)
        rows = self._db.execute(
            "DELETE FROM outbox WHERE enqueued_ms < ? RETURNING LENGTH(envelope)", (cutoff,)
        ).fetchall()
        if rows:
            self._forget(rows)
            self._count("expired", len(rows))
        return len(rows)

    def _drop_oldest(self, need: int, dropped: list[str]) -> None:
        freed, count = 0, 0
        while freed < need:
            oldest = self._db.execute(
                "SELECT seq, message_id, LENGTH(envelope) FROM outbox ORDER BY seq LIMIT 64"
            ).fetchall()
            if not oldest:
                break
            for seq, message_id, size in oldest:
                if freed >= need:
                    break
                self._db.execute("DELETE FROM outbox WHERE seq = ?", (seq,))
                freed, count = freed + size, count + 1
                dropped.append(message_id)
        self._depth -= count
        self._bytes -= freed
        self._count("dropped_oldest", count)

    def _forget(self, rows: list[tuple[int]]) -> None:
        """Take deleted rows (their ``LENGTH(envelope)``) off the in-memory totals."""
        self._depth -= len(rows)
        self._bytes -= sum(r[0] for r in rows)

    def _count(self, name: str, n: int = 1) -> None:
        if n:
            self._db.execute(
                "INSERT INTO counters (name, value) VALUES (?, ?) "
                "ON CONFLICT (name) DO UPDATE SET value = value + excluded.value",
                (name, n),
            )

    # --- the sender's side --------------------------------------------------------------

    def due(
        self,
        endpoint: str,
        limit: int,
        after_seq: int = 0,
        max_bytes: int | None = None,
        skip: Collection[int] = (),
    ) -> list[DueMessage]:
        """Return messages of ``endpoint`` due now, oldest first: a frame's worth.

        Args:
            endpoint: "telemetry" or "alarms".
            limit: at most this many.
            after_seq: the sender's cursor: messages at or below it were sent on this
                stream already, so only those among them that wait for a retry are due.
            max_bytes: at most this many envelope bytes (but always at least one message).
            skip: seqs of retried messages already in flight again.
        """
        now = _now_ms()
        with self._mutex:
            rows = []
            if after_seq:
                rows = self._db.execute(
                    f"SELECT {_COLUMNS} FROM outbox WHERE endpoint = ? AND attempts > 0 "
                    "AND seq <= ? AND not_before_ms <= ? ORDER BY seq LIMIT ?",
                    (endpoint, after_seq, now, limit + len(skip)),
                ).fetchall()
                rows = [r for r in rows if r[0] not in skip][:limit]
            if len(rows) < limit:
                rows += self._db.execute(
                    f"SELECT {_COLUMNS} FROM outbox WHERE endpoint = ? AND seq > ? "
                    "AND not_before_ms <= ? ORDER BY seq LIMIT ?",
                    (endpoint, after_seq, now, limit - len(rows)),
                ).fetchall()
        frame: list[DueMessage] = []
        size = 0
        for row in rows:
            size += len(row[3])
            if frame and max_bytes is not None and size > max_bytes:
                break
            frame.append(DueMessage(*row))
        return frame

    def next_due_in_s(self, endpoint: str) -> float | None:
        """Return seconds until the next message of ``endpoint`` is due; None if none."""
        with self._mutex:
            (not_before,) = self._db.execute(
                "SELECT MIN(not_before_ms) FROM outbox WHERE endpoint = ?", (endpoint,)
            ).fetchone()
        return None if not_before is None else max(0.0, (not_before - _now_ms()) / 1000)

    @contextlib.contextmanager
    def _bookkeeping(self) -> Iterator[None]:
        """A transaction that records what happened to spooled messages, without a flush.

        Losing it to a power cut only means resending (same id, dropped by the enricher)
        or trying once more; the next enqueue's flush makes it durable anyway. On gateway
        storage (SD cards, eMMC) a flush per answered frame would cost more than sending.
        """
        with self._mutex:
            relax = self._synchronous == "FULL"
            if relax:
                self._db.execute("PRAGMA synchronous=NORMAL")
            try:
                with self._db:
                    self._db.execute("BEGIN IMMEDIATE")
                    yield
            finally:
                if relax:
                    self._db.execute("PRAGMA synchronous=FULL")

    def delivered(self, seqs: list[int]) -> None:
        """Delete messages the ingest service answered OK for."""
        if not seqs:
            return
        with self._bookkeeping():
            rows = self._db.execute(
                f"DELETE FROM outbox WHERE seq IN ({','.join('?' * len(seqs))}) "
                "RETURNING LENGTH(envelope)",
                seqs,
            ).fetchall()
            self._forget(rows)
            self._count("delivered", len(rows))

    def retry_later(self, seqs: list[int], delay_s: float) -> None:
        """Keep messages for another attempt, not before ``delay_s`` from now."""
        if not seqs:
            return
        with self._bookkeeping():
            updated = self._db.execute(
                "UPDATE outbox SET attempts = attempts + 1, not_before_ms = ? "
                f"WHERE seq IN ({','.join('?' * len(seqs))})",
                [_now_ms() + int(delay_s * 1000), *seqs],
            ).rowcount
            self._count("retried", updated)

    def reject(self, seq: int, code: str, reason: str, detail: str) -> None:
        """Move a message the service refused for good to the rejected table."""
        with self._bookkeeping():
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
            self._forget([(len(row[2]),)])
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
            (oldest,) = self._db.execute("SELECT MIN(enqueued_ms) FROM outbox").fetchone()
            counters = dict(self._db.execute("SELECT name, value FROM counters").fetchall())
            depth, size = self._depth, self._bytes
        age = 0.0 if oldest is None else (_now_ms() - oldest) / 1000
        return SpoolStats(depth, size, age, counters)


def _check_endpoint(endpoint: str) -> None:
    if endpoint not in ENDPOINTS:
        raise ValueError(f"unknown endpoint {endpoint!r}; one of {', '.join(ENDPOINTS)}")


def _build(
    new: NewMessage, message_id: str, sequence: int, now: int
) -> device_message_pb2.DeviceMessage:
    msg = device_message_pb2.DeviceMessage(
        message_id=message_id,
        device_id=new.device_id,
        sequence=sequence,
        content_type=new.content_type,
        payload=new.payload,
    )
    if new.attributes:
        msg.attributes.update(new.attributes)
    msg.device_time.FromMilliseconds(now if new.device_time_ms is None else new.device_time_ms)
    return msg


def _now_ms() -> int:
    return int(time.time() * 1000)
