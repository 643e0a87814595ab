"""Kill the gateway mid-send and start it again: every spooled message arrives; after dedup
by message id, exactly once."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from headwater.devstack.readback import read_topic
from headwater.gateway.spool import Spool
from headwater.proto.device.v1 import device_message_pb2
from headwater.topics import INGEST_TOPICS

from .conftest import TOKENS

CT = "application/vnd.acme.telemetry.v1+json"


def _drain(spool: Path, target: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "headwater.cli",
            "gateway",
            "drain",
            "--spool",
            str(spool),
            "--target",
            target,
            "--frame-messages",
            "20",
            "--within",
            "60",
        ],
        env=os.environ | {"HEADWATER_GATEWAY_TOKEN": TOKENS["gw-a"]},
        stderr=subprocess.PIPE,
    )


def _delivered(spool: Path) -> int:
    # Read-only peek while the sender holds the spool (WAL allows concurrent readers).
    with sqlite3.connect(f"file:{spool}?mode=ro", uri=True) as db:
        row = db.execute("SELECT value FROM counters WHERE name = 'delivered'").fetchone()
    return row[0] if row else 0


async def test_sigkill_mid_send_then_restart_delivers_everything(
    start_ingest, ingest_settings, kafka_bootstrap, tmp_path: Path
) -> None:
    running = await start_ingest(ingest_settings)
    path = tmp_path / "spool.db"
    with Spool(path) as spool:
        ids = {
            spool.enqueue("telemetry", f"acme-{i % 5}", CT, b"{}").message_id for i in range(3000)
        }

    first = _drain(path, running.target)
    deadline = time.monotonic() + 60
    while _delivered(path) < 200:
        assert first.poll() is None, first.stderr.read() if first.stderr else ""
        assert time.monotonic() < deadline, "the sender delivered nothing"
        await asyncio.sleep(0.02)  # the ingest server runs on this loop
    first.send_signal(signal.SIGKILL)
    await asyncio.to_thread(first.wait, 10)
    delivered_before_kill = _delivered(path)
    assert delivered_before_kill < len(ids), "killed too late to be mid-send"

    second = _drain(path, running.target)
    _, err = await asyncio.to_thread(second.communicate, timeout=90)
    assert second.returncode == 0, err.decode()[-2000:]

    seen: Counter[str] = Counter()
    for record in read_topic(kafka_bootstrap, INGEST_TOPICS["telemetry"]):
        msg = device_message_pb2.DeviceMessage.FromString(record.value())
        if msg.message_id in ids:
            seen[msg.message_id] += 1
    assert set(seen) == ids  # nothing lost; dedup by id leaves each exactly once
    # Resends are only what was in flight at the kill: at most a window of frames.
    assert sum(seen.values()) - len(ids) <= 4 * 20
    with Spool(path) as spool:
        assert spool.stats().depth == 0
