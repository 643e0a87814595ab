"""Kill the gateway mid-send (SIGKILL) and start it again: every spooled message arrives,
exactly once after dedup by message id, and sequence numbers carry on without a gap."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import sys
import uuid
from collections import defaultdict
from pathlib import Path

from headwater.proto.device.v1 import device_message_pb2
from headwater.topics import INGEST_TOPICS
from tests.support.kafkatools import read_ingest_since_test_began

from .conftest import TOKENS

ROOT = Path(__file__).parents[2]


async def _gateway(
    spool: Path, target: str, count: int, prefix: str, *more: str
) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.gateway.gateway_proc",
        "--spool",
        str(spool),
        "--target",
        target,
        "--count",
        str(count),
        "--prefix",
        prefix,
        *more,
        cwd=ROOT,
        env=os.environ | {"HEADWATER_GATEWAY_TOKEN": TOKENS["gw-a"]},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


def _delivered(spool: Path) -> int:
    # Read-only peek while the gateway holds the spool (WAL allows concurrent readers).
    try:
        with sqlite3.connect(f"file:{spool}?mode=ro", uri=True) as db:
            row = db.execute("SELECT value FROM counters WHERE name = 'delivered'").fetchone()
    except sqlite3.OperationalError:  # not created yet
        return 0
    return row[0] if row else 0


async def _read_enqueued(proc: asyncio.subprocess.Process, into: list[tuple[str, str, int]]) -> str:
    """Collect the ``id device sequence`` lines; return the last other line (the verdict)."""
    assert proc.stdout is not None
    last = ""
    async for raw in proc.stdout:
        parts = raw.decode().split()
        if len(parts) == 3:
            into.append((parts[0], parts[1], int(parts[2])))
        else:
            last = raw.decode().strip()
    return last


async def test_sigkill_mid_send_then_restart_delivers_everything_once_in_sequence(
    start_ingest, ingest_settings, kafka_bootstrap, tmp_path: Path
) -> None:
    running = await start_ingest(ingest_settings)
    path = tmp_path / "spool.db"
    prefix = f"acme-kill{uuid.uuid4().hex[:6]}"
    enqueued: list[tuple[str, str, int]] = []

    first = await _gateway(path, running.target, 4000, prefix, "--batch", "50")
    reader = asyncio.create_task(_read_enqueued(first, enqueued))
    async with asyncio.timeout(60):
        # Kill with more than two frames spooled but not yet acknowledged: a sender that
        # keeps up with the enqueuer (it did on a loaded CI machine) must not make the kill
        # land between sends.
        while (delivered := _delivered(path)) < 300 or len(enqueued) - delivered < 50:
            assert first.returncode is None, "the first gateway ended before the kill"
            await asyncio.sleep(0.02)  # the ingest server runs on this loop
    first.send_signal(signal.SIGKILL)
    await asyncio.wait_for(first.wait(), 10)
    assert await asyncio.wait_for(reader, 10) == ""  # killed: it never said DRAINED
    delivered_before_kill = _delivered(path)
    assert delivered_before_kill < len(enqueued) < 4000, "killed too late to be mid-send"

    second = await _gateway(path, running.target, 500, prefix)
    verdict = await asyncio.wait_for(_read_enqueued(second, enqueued), 90)
    _, err = await second.communicate()
    assert second.returncode == 0 and verdict == "DRAINED", err.decode()[-2000:]

    ids = {message_id for message_id, _, _ in enqueued}
    copies: dict[str, int] = defaultdict(int)
    sequence_of: dict[str, tuple[str, int]] = {}
    for record in read_ingest_since_test_began(kafka_bootstrap, INGEST_TOPICS["telemetry"]):
        msg = device_message_pb2.DeviceMessage.FromString(record.value())
        if msg.device_id.startswith(prefix):
            copies[msg.message_id] += 1
            sequence_of[msg.message_id] = (msg.device_id, msg.sequence)
    # Nothing that was spooled is lost. (A batch committed in the instant before the kill,
    # but not yet printed, may be in Kafka without being in `enqueued`: at most one batch.)
    assert ids <= set(copies)
    assert len(set(copies) - ids) <= 50  # one batch of the first run
    # After dedup by message id, each message is there once; resends are what was in
    # flight at the kill, at most a window of frames.
    assert sum(copies.values()) - len(copies) <= 4 * 20
    # Sequences per device: 1, 2, 3, ... across the restart, no gap and no repeat.
    per_device: dict[str, list[int]] = defaultdict(list)
    for device, sequence in sequence_of.values():
        per_device[device].append(sequence)
    assert len(per_device) == 5
    for device, sequences in per_device.items():
        assert sorted(sequences) == list(range(1, len(sequences) + 1)), device
    # What the second run printed continues each device's count.
    for message_id, device, sequence in enqueued:
        assert sequence_of[message_id] == (device, sequence)
