"""A crash between handling and commit delivers again, and the SQLite dedup store absorbs it;
the example service counts completions exactly."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import sys
import uuid
from pathlib import Path

import pytest

from .conftest import committed, completion, produce

pytestmark = pytest.mark.slow
EXAMPLE = Path(__file__).parents[2] / "examples" / "completion_subscriber.py"

# Handles into a plain (not idempotent) table, so a repeat would show; the dedup store
# crashes the process right after recording the CRASH_AT-th id: handled, not committed.
WORKER = """
import asyncio, os, sqlite3, sys
from headwater.kafka_settings import KafkaSettings
from headwater.subscriber.dedup import SqliteDedup
from headwater.subscriber.subscriber import Subscriber

bootstrap, topic, group, workdir, crash_at, total = sys.argv[1:7]
db = sqlite3.connect(f"{workdir}/handled.db", isolation_level=None)
db.execute("CREATE TABLE IF NOT EXISTS handled (key TEXT)")

class CrashingDedup(SqliteDedup):
    recorded = 0
    def record(self, key):
        super().record(key)
        self.recorded += 1
        if self.recorded == int(crash_at):
            os._exit(9)

async def handle(delivery):
    db.execute("INSERT INTO handled VALUES (?)", (delivery.key,))

async def main():
    dedup = (CrashingDedup if int(crash_at) else SqliteDedup)(f"{workdir}/dedup.db")
    kafka = KafkaSettings(bootstrap_servers=bootstrap, enable_idempotence=False)
    sub = Subscriber(kafka, group, [topic], handle, dedup=dedup, start="earliest")
    stop = asyncio.Event()
    task = asyncio.create_task(sub.run(stop))
    while db.execute("SELECT COUNT(DISTINCT key) FROM handled").fetchone()[0] < int(total):
        await asyncio.sleep(0.1)
    stop.set()
    await task
    print(sub.counts["duplicate"])

asyncio.run(main())
"""


async def _run(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=os.environ | {"HEADWATER_KAFKA_ENABLE_IDEMPOTENCE": "false"},
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_crash_between_handling_and_commit_is_absorbed_by_the_sqlite_dedup(
    kafka_bootstrap, topic_factory, tmp_path
):
    topic = topic_factory("completions")
    produce(kafka_bootstrap, topic, [completion(f"m{i}") for i in range(400)])
    group = f"g-{uuid.uuid4().hex[:8]}"
    common = [kafka_bootstrap, topic, group, str(tmp_path)]
    code, _, err = await _run("-c", WORKER, *common, "150", "400")
    assert code == 9, err[-2000:]  # crashed on purpose after handling the 150th
    code, out, err = await _run("-c", WORKER, *common, "0", "400")
    assert code == 0, err[-2000:]
    redelivered_and_absorbed = int(out.strip().splitlines()[-1])
    assert redelivered_and_absorbed >= 1  # the crashed batch came again
    with sqlite3.connect(tmp_path / "handled.db") as db:
        rows = db.execute("SELECT key, COUNT(*) FROM handled GROUP BY key").fetchall()
    assert len(rows) == 400 and {n for _, n in rows} == {1}  # each handled exactly once
    assert committed(kafka_bootstrap, group, topic) == [400]


async def test_example_service_counts_completions_per_device_and_outcome(
    kafka_bootstrap, topic_factory, tmp_path
):
    topic = topic_factory("completions")
    produce(kafka_bootstrap, topic, [completion(f"m{i}", f"acme-{i % 3}") for i in range(30)])
    produce(kafka_bootstrap, topic, [completion("m0", "acme-0")])  # a replay: not counted
    code, out, err = await _run(
        str(EXAMPLE),
        "--db",
        str(tmp_path / "counts.db"),
        "--group",
        f"g-{uuid.uuid4().hex[:8]}",
        "--bootstrap-servers",
        kafka_bootstrap,
        "--topic",
        topic,
        "--start",
        "earliest",
        "--max-seconds",
        "15",
    )
    assert code == 0, err[-2000:]
    assert json.loads(out.strip().splitlines()[-1]) == {"handled": 30, "duplicate": 1, "parked": 0}
    with sqlite3.connect(tmp_path / "counts.db") as db:
        counts = db.execute(
            "SELECT device_id, outcome, n FROM counts ORDER BY device_id"
        ).fetchall()
    assert counts == [
        ("acme-0", "ENRICHED", 10),
        ("acme-1", "ENRICHED", 10),
        ("acme-2", "ENRICHED", 10),
    ]
