"""Per-partition lanes (headwater.gateway.lanes) as units: the bookkeeping, on a real spool file.

No server: each test answers the frames itself (OK with the partition of the device, or
not at all, as a partition electing a new leader does) and moves the clock by hand.
"""

from __future__ import annotations

import dataclasses
import random
from collections import defaultdict
from pathlib import Path

import pytest

from headwater.gateway.lanes import (
    LINGER_S,
    QUEUED_FRAMES,
    STALLED_AFTER_S,
    UNKNOWN,
    Frame,
    LaneLimits,
    Lanes,
    device_of,
    read_spool,
)
from headwater.gateway.spool import NewMessage, Spool
from headwater.proto.device.v1 import device_message_pb2
from tests.gateway.conftest import CT

LIMITS = LaneLimits(lane_frames=2, stream_frames=8, frame_messages=10, frame_bytes=1 << 20)
#: Each test device's partition, as ingest's OKs name it.
PARTITION = {"a": 0, "b": 1, "c": 2, "d": 0, "e": 1, "f": 2}


@pytest.fixture
def spool(tmp_path: Path):
    with Spool(tmp_path / "spool.db", synchronous="NORMAL") as s:
        yield s


def spool_round(spool: Spool, devices: str, rounds: int = 1) -> None:
    """``rounds`` messages of each of ``devices``, interleaved as devices report."""
    batch = [NewMessage(d, CT, b"{}") for _ in range(rounds) for d in devices]
    spool.enqueue_many("telemetry", batch)


def fill(lanes: Lanes, spool: Spool, now: float) -> None:
    read_spool(lanes, spool, "telemetry", lanes.limits.frame_messages, 1 << 20, now)


def frames_now(lanes: Lanes, now: float) -> list[Frame]:
    """The frames that go at ``now`` and those that linger no longer than allowed."""
    return lanes.frames(now) + lanes.frames(now + LINGER_S)


def answer_ok(lanes: Lanes, spool: Spool, frame: Frame) -> None:
    spool.delivered([r.seq for r in frame.rows])
    lanes.answered(frame, [PARTITION[d] for d in frame.devices])


def sequences(frame: Frame) -> list[tuple[str, int]]:
    return [
        (d, device_message_pb2.DeviceMessage.FromString(r.envelope).sequence)
        for d, r in zip(frame.devices, frame.rows, strict=True)
    ]


def learn(lanes: Lanes, spool: Spool, devices: str) -> None:
    """One message per device, answered OK: the lanes know every device's partition."""
    spool_round(spool, devices)
    while spool.depth:
        fill(lanes, spool, 0.0)
        for frame in lanes.frames(0.0):
            answer_ok(lanes, spool, frame)
    assert set(lanes.partition_of) == set(devices)


def test_devices_share_the_unknown_lane_until_an_ok_names_their_partition(spool) -> None:
    lanes = Lanes(LIMITS)
    spool_round(spool, "abc", rounds=2)
    fill(lanes, spool, 0.0)
    (first,) = lanes.frames(0.0)
    assert first.lane == UNKNOWN and len(first.rows) == 6
    answer_ok(lanes, spool, first)
    spool_round(spool, "abc", rounds=2)
    fill(lanes, spool, 0.0)
    frames = frames_now(lanes, 0.0)
    assert {f.lane: set(f.devices) for f in frames} == {0: {"a"}, 1: {"b"}, 2: {"c"}}


def test_a_stalled_partition_holds_only_its_own_frames(spool) -> None:
    lanes = Lanes(LIMITS)
    learn(lanes, spool, "abcdef")
    stuck: list[Frame] = []
    sent: list[Frame] = []
    now = 0.0
    for _ in range(60):  # 6 s of a partition 0 that answers nothing
        spool_round(spool, "abcdef", rounds=2)
        fill(lanes, spool, now)
        for frame in frames_now(lanes, now):
            sent.append(frame)
            if frame.lane == 0:
                stuck.append(frame)
            else:
                answer_ok(lanes, spool, frame)
        assert len(stuck) <= LIMITS.lane_frames
        # Read ahead is bounded: the rest of partition 0's messages wait in the spool.
        assert len(lanes.lane(0).queue) <= QUEUED_FRAMES * LIMITS.frame_messages
        now += 0.1
    others = [r for f in sent if f.lane != 0 for r in f.rows]
    assert len(others) == 60 * 2 * 4, "partitions 1 and 2 went on"
    assert lanes.lane(0).parked_from is not None
    waiting = spool.depth
    assert waiting == 60 * 2 * 2  # partition 0's, all of them still spooled
    # The election is over: partition 0 answers, and everything it held goes, in order.
    for frame in stuck:
        answer_ok(lanes, spool, frame)
    for _ in range(100):
        fill(lanes, spool, now)
        for frame in lanes.frames(now):
            sent.append(frame)
            answer_ok(lanes, spool, frame)
        now += 0.1
        if not spool.depth:
            break
    fill(lanes, spool, now)  # reads the parked stretch once more: nothing left in it
    assert spool.depth == 0 and lanes.idle
    assert_in_order_once(sent, range(2, 2 + 60 * 2))  # 1 went before, in learn()


def assert_in_order_once(sent: list[Frame], expected: range) -> None:
    """Each device's messages (``expected`` sequences) were sent once each, in order."""
    by_device: dict[str, list[int]] = defaultdict(list)
    for frame in sent:
        for device, sequence in sequences(frame):
            by_device[device].append(sequence)
    for device, seqs in by_device.items():
        assert seqs == list(expected), device


def test_a_full_lane_that_still_answers_stops_the_reading_instead_of_parking(spool) -> None:
    lanes = Lanes(LIMITS)
    learn(lanes, spool, "ab")
    spool_round(spool, "a", rounds=10 * LIMITS.frame_messages)
    spool_round(spool, "b")
    fill(lanes, spool, 1.0)
    assert len(lanes.frames(1.0)) == LIMITS.lane_frames
    fill(lanes, spool, 1.0 + STALLED_AFTER_S / 2)
    lane = lanes.lane(0)
    assert lane.parked_from is None
    assert len(lane.queue) == QUEUED_FRAMES * LIMITS.frame_messages
    # The reading stopped at a's next message, before b's: b waits in the spool.
    assert "b" not in {d for _, d in lanes.lane(1).queue}
    later = 1.0 + 2 * STALLED_AFTER_S  # a's answers are overdue now: parked
    while not lanes.lane(1).queue:  # through a's backlog, a few frames' worth a fill
        fill(lanes, spool, later)
    assert lane.parked_from is not None
    assert {d for _, d in lanes.lane(1).queue} == {"b"}


def test_a_device_stays_in_its_lane_while_its_messages_wait_there(spool) -> None:
    lanes = Lanes(LaneLimits(1, 8, 2, 1 << 20))
    spool_round(spool, "a", rounds=3)
    fill(lanes, spool, 0.0)
    (first,) = lanes.frames(0.0)  # a's 1 and 2; a's 3 waits in the unknown lane
    answer_ok(lanes, spool, first)  # a is on partition 0 now
    spool_round(spool, "a")
    fill(lanes, spool, 0.0)
    assert lanes.lane_of("a").key == UNKNOWN  # its message 3 is still queued there
    (second,) = lanes.frames(0.0)
    assert second.lane == UNKNOWN and sequences(second) == [("a", 3), ("a", 4)]
    answer_ok(lanes, spool, second)
    spool_round(spool, "a")
    fill(lanes, spool, 0.0)
    (third,) = lanes.frames(0.0)
    assert third.lane == 0 and sequences(third) == [("a", 5)]


def test_pushback_pauses_only_its_lane(spool) -> None:
    lanes = Lanes(LIMITS)
    learn(lanes, spool, "abc")
    lanes.pause(0, until=5.0)
    spool_round(spool, "abc")
    fill(lanes, spool, 1.0)
    frames = frames_now(lanes, 1.0)
    assert sorted(f.lane for f in frames) == [1, 2]
    for frame in frames:
        answer_ok(lanes, spool, frame)
    assert lanes.wake_at(1.0) == 5.0
    assert [f.lane for f in lanes.frames(5.0)] == [0]


def test_the_stream_window_bounds_every_lane_together(spool) -> None:
    lanes = Lanes(LaneLimits(lane_frames=2, stream_frames=3, frame_messages=1, frame_bytes=1 << 20))
    learn(lanes, spool, "abc")
    spool_round(spool, "abc", rounds=5)
    fill(lanes, spool, 0.0)
    frames = lanes.frames(0.0)
    assert len(frames) == 3 and lanes.inflight == 3
    assert len({f.lane for f in frames}) == 3, "the lanes take turns"
    answer_ok(lanes, spool, frames[0])
    assert len(lanes.frames(0.0)) == 1


def test_retries_of_a_parked_lane_wait_for_its_turn(spool) -> None:
    """A retry that falls among a parked lane's messages comes back with them, in order."""
    lanes = Lanes(LaneLimits(lane_frames=1, stream_frames=8, frame_messages=2, frame_bytes=1 << 20))
    learn(lanes, spool, "ab")
    spool_round(spool, "a", rounds=8)
    fill(lanes, spool, 0.0)
    (stuck,) = lanes.frames(0.0)
    fill(lanes, spool, 2 * STALLED_AFTER_S)  # 2 queued, then parked from a's 6th
    lane = lanes.lane(0)
    parked_from = lane.parked_from
    assert parked_from is not None
    # A message of the parked stretch that waits for a retry (from an earlier stream).
    later = [r.seq for r in spool.due_after("telemetry", 100, parked_from - 1)]
    spool.retry_later([later[0]], 0)
    fill(lanes, spool, 2 * STALLED_AFTER_S)
    assert later[0] not in {r.seq for r, _ in lane.queue}
    answer_ok(lanes, spool, stuck)
    sent = [stuck]
    now = 3 * STALLED_AFTER_S
    while spool.depth:
        fill(lanes, spool, now)
        for frame in lanes.frames(now):
            sent.append(frame)
            answer_ok(lanes, spool, frame)
    assert_in_order_once(sent, range(2, 10))


@pytest.mark.parametrize("seed", range(5))
def test_random_stalls_keep_each_devices_order_and_lose_nothing(spool, seed: int) -> None:
    """Partitions stall and recover at random while devices keep reporting."""
    rng = random.Random(seed)
    lanes = Lanes(LaneLimits(lane_frames=2, stream_frames=5, frame_messages=4, frame_bytes=1 << 20))
    stalled_until = {p: 0.0 for p in range(3)}
    stalled_until[rng.randrange(3)] = 3 * STALLED_AFTER_S  # one election at least
    inflight: list[Frame] = []
    sent: list[Frame] = []
    rounds, now, parked = 0, 0.0, 0
    while rounds < 80 or spool.depth:
        if rounds < 80:
            spool_round(spool, "".join(rng.sample("abcdef", rng.randint(1, 6))))
            rounds += 1
        if rng.random() < 0.05:
            stalled_until[rng.randrange(3)] = now + rng.uniform(0.5, 4 * STALLED_AFTER_S)
        fill(lanes, spool, now)
        new = lanes.frames(now)
        sent += new
        inflight += new
        for frame in list(inflight):
            partitions = {PARTITION[d] for d in frame.devices}
            if all(stalled_until[p] <= now for p in partitions) and rng.random() < 0.7:
                inflight.remove(frame)
                answer_ok(lanes, spool, frame)
        for key in {f.lane for f in inflight}:
            lane = lanes.lane(key)
            assert len(lane.queue) <= QUEUED_FRAMES * lanes.limits.frame_messages
            assert len(lane.sent) <= lanes.limits.lane_frames
        assert lanes.inflight <= lanes.limits.stream_frames
        parked += any(lanes.lane(k).parked_from is not None for k in (UNKNOWN, 0, 1, 2))
        if not inflight and lanes.idle:
            lanes.rewind()
        now += 0.1
        assert now < 1000, "the spool never drained"
    assert parked, "no lane was ever parked: the test proves less than it says"
    counts: dict[str, list[int]] = defaultdict(list)
    for frame in sent:
        for device, sequence in sequences(frame):
            counts[device].append(sequence)
    for device, seqs in counts.items():
        assert seqs == list(range(1, len(seqs) + 1)), (device, seqs)
    # Sent once each (no answer was lost here) and every one delivered.
    assert sum(len(s) for s in counts.values()) == spool.stats().counters["delivered"]


def test_a_part_filled_frame_lingers_only_while_others_are_in_flight(spool) -> None:
    lanes = Lanes(LIMITS)
    learn(lanes, spool, "ab")
    spool_round(spool, "ab")
    fill(lanes, spool, 1.0)
    (first,) = lanes.frames(1.0)  # nothing in flight: the first part-filled frame goes at once
    assert lanes.frames(1.0) == []  # the other waits for more messages, or an answer ...
    assert lanes.wake_at(1.0) == pytest.approx(1.0 + LINGER_S)
    (second,) = lanes.frames(1.0 + LINGER_S)  # ... for a while only
    assert {first.lane, second.lane} == {0, 1}
    answer_ok(lanes, spool, first)
    answer_ok(lanes, spool, second)
    # A full frame never lingers.
    spool_round(spool, "a", rounds=LIMITS.frame_messages)
    spool_round(spool, "b", rounds=LIMITS.frame_messages)
    fill(lanes, spool, 2.0)
    assert len(lanes.frames(2.0)) == 2


def test_the_device_is_read_from_the_envelope_without_decoding_it(spool) -> None:
    spool.enqueue_many(
        "telemetry",
        [
            NewMessage("acme-ünï-1", CT, b"x" * 300, attributes={"site": "b"}),
            NewMessage("d" * 200, CT, b"", device_time_ms=1),
        ],
    )
    rows = spool.due("telemetry", 10)
    for row in rows:
        decoded = device_message_pb2.DeviceMessage.FromString(row.envelope).device_id
        assert device_of(row) == decoded
    garbage = dataclasses.replace(rows[0], envelope=b"\x0f\xff")
    assert device_of(garbage) == ""  # not a message: the unknown lane
