"""One stream's messages in lanes, one per Kafka partition: a stalled partition holds only its own.

Ingest answers a stream frame once every message in it is resolved, so a frame that mixes
partitions waits for the slowest of them. While one partition elects a new leader (10-20 s)
every such frame waits, and with a window of frames in flight the whole stream stops. So
the sender groups a device's messages by the partition its OKs named
(``MessageResult.partition``, learned from every OK; devices not answered yet share a lane
of their own, :data:`UNKNOWN`), and every lane has its own frames in flight within the
stream's window: a stalled partition's lane fills its own share and the others go on.

Order, as without lanes: a device's messages enter one lane in spool order, and a device
changes lane only once none of its messages waits in the old one (queued or parked), so a
later message is never sent before an earlier one has been sent; all lanes share one
stream, on which ingest issues frames in the order they arrive. A retried message does not
hold back the ones behind it (as before).

Memory: a lane queues at most two frames read ahead. A lane that is full and stalled (its
oldest frame unanswered for :data:`STALLED_AFTER_S`, or paused by pushback) is *parked*:
its messages from then on stay in the spool only (the first one's seq is kept) and are read
again in spool order once it has room; a lane that is full but answering stops the reading
instead, as a full window did before. :class:`Lanes` is pure bookkeeping (no I/O; the
caller passes the time); :func:`read_spool` fills it from the spool (blocking: the sender
runs it in a worker thread).
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from google.protobuf.message import DecodeError

from headwater.gateway.records import DueMessage
from headwater.gateway.spool import Spool
from headwater.proto.device.v1 import device_message_pb2

#: The lane of devices whose partition no OK has named yet.
UNKNOWN = -1
#: A full lane whose oldest frame has waited this long is parked, not waited for.
STALLED_AFTER_S = 1.0
#: Frames' worth of messages a lane may hold read but not yet sent.
QUEUED_FRAMES = 2
#: Reads of new messages per fill at most (each a frame's worth): enough to give every
#: lane a full frame, so a stream of many lanes still sends full frames.
READS_PER_FILL = 16
#: How long a part-filled frame may wait for more messages while other frames are in flight.
LINGER_S = 0.02


@dataclass(frozen=True)
class LaneLimits:
    """The windows and the frame size the lanes keep to."""

    lane_frames: int
    stream_frames: int
    frame_messages: int
    frame_bytes: int


@dataclass(frozen=True)
class Frame:
    """Messages of one lane sent together, with each one's device."""

    lane: int
    rows: tuple[DueMessage, ...]
    devices: tuple[str, ...]
    sent_at: float


@dataclass
class Lane:
    """One partition's messages: read and waiting, in flight, or parked in the spool."""

    key: int
    queue: deque[tuple[DueMessage, str]] = field(default_factory=deque)
    queued_bytes: int = 0
    #: When the oldest queued message was read (a part-filled frame lingers from then).
    queued_since: float = 0.0
    #: When each unanswered frame was sent.
    sent: list[float] = field(default_factory=list)
    #: Parked: this lane's messages from this seq on are in the spool only.
    parked_from: int | None = None
    parked_devices: set[str] = field(default_factory=set)
    paused_until: float = 0.0

    def stalled(self, now: float) -> bool:
        """True when it cannot move now: paused, or an answer is long overdue."""
        return self.paused_until > now or bool(self.sent and now - min(self.sent) > STALLED_AFTER_S)


def device_of(row: DueMessage) -> str:
    """The device a spooled message is from (the Kafka key, which picks its partition).

    The spool built the envelope, so it parses; "" (the unknown lane) if not. (Decoding it
    whole takes 0.6 us, less than reading the one field in Python.)
    """
    try:
        return device_message_pb2.DeviceMessage.FromString(row.envelope).device_id
    except DecodeError:
        return ""


class Lanes:
    """Which lane each spooled message is in, and which frames may go now."""

    def __init__(self, limits: LaneLimits) -> None:
        self.limits = limits
        #: Device -> the partition its last OK named; kept across streams (one per device).
        self.partition_of: dict[str, int] = {}
        self.rewind()

    def rewind(self) -> None:
        """Forget what was read (a new stream, or nothing queued or in flight): start over."""
        #: The highest seq read ahead; below it only retries and parked messages are read.
        self.cursor = 0
        self.inflight = 0
        self._lanes: dict[int, Lane] = {}
        #: Device -> the lane holding its queued or parked messages (it stays there).
        self._pinned: dict[str, int] = {}
        self._queued: Counter[str] = Counter()
        #: Seqs queued or in flight, and those of them that are retries.
        self._held: set[int] = set()
        self.held_retries: set[int] = set()
        self._turn = 0

    @property
    def idle(self) -> bool:
        """Nothing queued, parked or in flight."""
        return not self._held and all(lane.parked_from is None for lane in self._lanes.values())

    def lane(self, key: int) -> Lane:
        """The lane ``key`` (a partition, or :data:`UNKNOWN`)."""
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = Lane(key)
        return lane

    def lane_of(self, device: str) -> Lane:
        """The lane a device's next message goes to."""
        key = self._pinned.get(device)
        return self.lane(self.partition_of.get(device, UNKNOWN) if key is None else key)

    # --- reading from the spool ---------------------------------------------------------

    def read(self, rows: Sequence[DueMessage], now: float) -> bool:
        """Take rows read past the cursor, in spool order; False: read no further for now.

        Each row is queued in its lane, or parked if the lane is parked or full and
        stalled. At a row whose lane is full but moving, reading stops there (the cursor
        stays before it), as a full window stopped it before lanes.
        """
        for row in rows:
            device = device_of(row)
            lane = self.lane_of(device)
            if lane.parked_from is None and self._room(lane):
                self._queue(lane, row, device, now)
            elif lane.parked_from is not None or lane.stalled(now):
                if lane.parked_from is None:
                    lane.parked_from = row.seq
                lane.parked_devices.add(device)
                self._pinned[device] = lane.key
            else:
                return False
            self.cursor = row.seq
        return True

    def retries(self, rows: Iterable[DueMessage], now: float) -> None:
        """Take due retries (at or below the cursor) into lanes with room; the rest wait."""
        for row in rows:
            if row.seq in self._held:
                continue
            device = device_of(row)
            lane = self.lane_of(device)
            if self._parked_there(lane, row, device):
                continue  # read again in order with the lane's parked messages
            if self._room(lane):
                self._queue(lane, row, device, now)

    def parked(self) -> list[tuple[int, int]]:
        """Parked lanes with room to read again: (lane, the seq to read from)."""
        return [
            (lane.key, lane.parked_from)
            for lane in self._lanes.values()
            if lane.parked_from is not None and self._room(lane)
        ]

    def reread(self, key: int, rows: Sequence[DueMessage], now: float) -> None:
        """Take a parked lane's messages back from rows read again from its ``parked_from``.

        ``rows``: every lane's due messages from there up to the cursor, in spool order;
        none: the lane's parked messages are all back (it is not parked any more).
        """
        lane = self._lanes[key]
        for row in rows:
            device = device_of(row)
            if row.seq in self._held or device not in lane.parked_devices:
                continue
            if not self._room(lane):
                lane.parked_from = row.seq
                return
            self._queue(lane, row, device, now)
        if rows:
            lane.parked_from = rows[-1].seq + 1
            return
        lane.parked_from = None
        devices, lane.parked_devices = lane.parked_devices, set()
        for device in devices:
            self._unpin(device, lane)

    # --- frames -------------------------------------------------------------------------

    def frames(self, now: float) -> list[Frame]:
        """Frames to send now: lanes in turn, within the lane's and the stream's window.

        A part-filled frame waits while its lane has frames in flight (like Nagle: an
        answer or more messages come soon, and fewer, fuller frames carry more), and for
        at most :data:`LINGER_S` while other lanes have; with nothing in flight on the
        stream it goes at once.
        """
        limits, out = self.limits, []
        keys = list(self._lanes)
        self._turn = (self._turn + 1) % max(1, len(keys))
        keys = keys[self._turn :] + keys[: self._turn]
        taken = True
        while taken and self.inflight < limits.stream_frames:
            taken = False
            for key in keys:
                lane = self._lanes[key]
                if self.inflight >= limits.stream_frames:
                    break
                if (
                    not lane.queue
                    or len(lane.sent) >= limits.lane_frames
                    or lane.paused_until > now
                    or (not self._full(lane) and self._lingers(lane, now))
                ):
                    continue
                out.append(self._take(lane, now))
                taken = True
        return out

    def answered(self, frame: Frame, partitions: Sequence[int]) -> None:
        """A frame was answered: free its place, learn the partitions its OKs named (-1: none)."""
        lane = self._lanes[frame.lane]
        lane.sent.remove(frame.sent_at)
        self.inflight -= 1
        for row in frame.rows:
            self._held.discard(row.seq)
            self.held_retries.discard(row.seq)
        for device, partition in zip(frame.devices, partitions, strict=True):
            if partition >= 0:
                self.partition_of[device] = partition

    def pause(self, key: int, until: float) -> None:
        """Pushback for one lane (its partition is unavailable): send it nothing until then."""
        lane = self.lane(key)
        lane.paused_until = max(lane.paused_until, until)

    def wake_at(self, now: float) -> float | None:
        """The next time after ``now`` the lanes change by themselves; None: never.

        A pause ends, a part-filled frame has lingered long enough, or a lane comes to count
        as stalled (its messages may then be parked).
        """
        times = [lane.paused_until for lane in self._lanes.values()]
        times += [
            lane.queued_since + LINGER_S
            for lane in self._lanes.values()
            if lane.queue and not lane.sent and lane.paused_until <= now
        ]
        times += [min(lane.sent) + STALLED_AFTER_S for lane in self._lanes.values() if lane.sent]
        return min((t for t in times if t > now), default=None)

    # --- bookkeeping --------------------------------------------------------------------

    def _room(self, lane: Lane) -> bool:
        limits = self.limits
        return not lane.queue or (
            len(lane.queue) < QUEUED_FRAMES * limits.frame_messages
            and lane.queued_bytes < QUEUED_FRAMES * limits.frame_bytes
        )

    def _full(self, lane: Lane) -> bool:
        limits = self.limits
        return (
            len(lane.queue) >= limits.frame_messages or 2 * lane.queued_bytes >= limits.frame_bytes
        )

    def _lingers(self, lane: Lane, now: float) -> bool:
        """A part-filled frame waits: its lane has one in flight, or others do (for a while)."""
        return bool(lane.sent) or (self.inflight > 0 and now - lane.queued_since < LINGER_S)

    def _parked_there(self, lane: Lane, row: DueMessage, device: str) -> bool:
        return (
            lane.parked_from is not None
            and row.seq >= lane.parked_from
            and device in lane.parked_devices
        )

    def _queue(self, lane: Lane, row: DueMessage, device: str, now: float) -> None:
        if not lane.queue:
            lane.queued_since = now
        lane.queue.append((row, device))
        lane.queued_bytes += len(row.envelope)
        self._queued[device] += 1
        self._pinned[device] = lane.key
        self._held.add(row.seq)
        if row.attempts:
            self.held_retries.add(row.seq)

    def _take(self, lane: Lane, now: float) -> Frame:
        limits = self.limits
        rows: list[DueMessage] = []
        devices: list[str] = []
        size = 0
        while lane.queue and len(rows) < limits.frame_messages:
            row, device = lane.queue[0]
            if rows and size + len(row.envelope) > limits.frame_bytes:
                break
            lane.queue.popleft()
            size += len(row.envelope)
            rows.append(row)
            devices.append(device)
            self._queued[device] -= 1
            if not self._queued[device]:
                del self._queued[device]
                self._unpin(device, lane)
        lane.queued_bytes -= size
        lane.queued_since = now
        lane.sent.append(now)
        self.inflight += 1
        return Frame(lane.key, tuple(rows), tuple(devices), now)

    def _unpin(self, device: str, lane: Lane) -> None:
        """Let a device change lane once nothing of it waits in ``lane``."""
        if device not in self._queued and device not in lane.parked_devices:
            self._pinned.pop(device, None)


def read_spool(
    lanes: Lanes, spool: Spool, endpoint: str, limit: int, max_bytes: int, now: float
) -> None:
    """Fill the lanes: due retries, parked lanes with room again, then new messages.

    Each read is at most ``limit`` messages and ``max_bytes`` (a frame's worth); ``now``
    is the sender's clock (``time.monotonic``).
    """
    if lanes.cursor:
        skip = set(lanes.held_retries)
        lanes.retries(spool.retries_due(endpoint, limit, lanes.cursor, skip, max_bytes), now)
    for key, first in lanes.parked():
        rows = spool.due_after(endpoint, limit, first - 1, max_bytes, lanes.cursor)
        lanes.reread(key, rows, now)
    for _ in range(READS_PER_FILL):
        rows = spool.due_after(endpoint, limit, lanes.cursor, max_bytes)
        if not lanes.read(rows, now) or len(rows) < limit:
            break
