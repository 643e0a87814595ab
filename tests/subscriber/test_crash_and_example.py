"""A process killed between handling and commit: the records come again and the SQLite
dedup store absorbs them. The example service counts completions exactly."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from headwater.proto.events.v1 import completion_pb2

from .conftest import TEST_SESSION_TIMEOUT_S, committed, completion, new_group, produce

EXAMPLE = Path(__file__).parents[2] / "examples" / "completion_subscriber.py"
ENV = os.environ | {
    "HEADWATER_SUBSCRIBER_SESSION_TIMEOUT_SECONDS": str(TEST_SESSION_TIMEOUT_S),
}

# Handles into a plain (not idempotent) table, so a repeat would show. With CRASH_AT set,
# the process SIGKILLs itself right after the dedup store recorded the CRASH_AT-th id:
# handled and recorded, not committed (a batch is committed when it is done).
WORKER = """
import asyncio, json, os, signal, sqlite3, sys
from headwater.kafka.settings import KafkaSettings
from headwater.subscriber import SqliteDedup, Subscriber, SubscriberSettings, decode_completion

bootstrap, topic, group, workdir, crash_at, total = sys.argv[1:7]
db = sqlite3.connect(f"{workdir}/handled.db", isolation_level=None)
db.execute("CREATE TABLE IF NOT EXISTS handled (key TEXT)")

class CrashingDedup(SqliteDedup):
    recorded = 0
    def record(self, key):
        super().record(key)
        self.recorded += 1
        if self.recorded == int(crash_at):
            os.kill(os.getpid(), signal.SIGKILL)

async def handle(delivery):
    db.execute("INSERT INTO handled VALUES (?)", (delivery.key,))

async def main():
    dedup = (CrashingDedup if int(crash_at) else SqliteDedup)(f"{workdir}/dedup.db")
    kafka = KafkaSettings(bootstrap_servers=bootstrap)
    # start= only on the first run: the second must resume from what was committed.
    settings = SubscriberSettings(
        group, (topic,), start="earliest" if int(crash_at) else None, session_timeout_s=6
    )
    sub = Subscriber(kafka, settings, handle, decode_completion, dedup=dedup)
    stop = asyncio.Event()
    task = asyncio.create_task(sub.run(stop))
    while sum(sub.counts.values()) < int(total) and not task.done():
        await asyncio.sleep(0.05)
    stop.set()
    await task
    print(json.dumps(sub.counts))

asyncio.run(main())
"""


async def _python(*args: str, timeout_s: float = 90) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=ENV,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout_s)
    finally:
        if proc.returncode is None:
            proc.kill()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


@pytest.mark.slow
async def test_crash_between_handling_and_commit_is_absorbed_by_the_sqlite_dedup(
    kafka_bootstrap, topic_factory, tmp_path
):
    topic = topic_factory("completions")
    produce(kafka_bootstrap, topic, [completion(f"m{i}") for i in range(400)])
    group = new_group(kafka_bootstrap)
    common = [kafka_bootstrap, topic, group, str(tmp_path)]
    code, _, err = await _python("-c", WORKER, *common, "150", "400")
    assert code == -signal.SIGKILL, err[-2000:]  # killed on purpose after the 150th
    (at_crash,) = committed(kafka_bootstrap, group, topic)
    assert 0 <= at_crash < 150  # the batch in hand was handled, not committed

    code, out, err = await _python("-c", WORKER, *common, "0", "400")
    assert code == 0, err[-2000:]
    counts = json.loads(out.strip().splitlines()[-1])
    # Everything handled but not committed came again, and the store absorbed all of it.
    assert counts == {"handled": 250, "duplicate": 150 - at_crash, "parked": 0}
    with sqlite3.connect(tmp_path / "handled.db") as db:
        rows = db.execute("SELECT key, COUNT(*) FROM handled GROUP BY key").fetchall()
    assert len(rows) == 400 and {n for _, n in rows} == {1}  # each handled exactly once
    assert committed(kafka_bootstrap, group, topic) == [400]


def test_example_help_runs_without_a_broker():
    result = subprocess.run(
        [sys.executable, str(EXAMPLE), "--help"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert "--start {earliest,latest}" in result.stdout and "SIGTERM" in result.stdout


def _example_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("completion_subscriber", EXAMPLE)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_example_write_is_idempotent_by_itself(tmp_path):
    example = _example_module()
    db = sqlite3.connect(tmp_path / "c.db")
    db.executescript(example.SCHEMA)
    c = completion_pb2.Completion(
        message_id="m1", device_id="acme-1", outcome=completion_pb2.OUTCOME_DEAD_LETTERED
    )
    for _ in range(3):  # as if the dedup store had lost its memory
        example.count_completion(db, "m1-key", c)
    example.count_completion(db, "m2-key", c)
    assert db.execute("SELECT * FROM counts").fetchall() == [("acme-1", "DEAD_LETTERED", 2)]


@pytest.mark.slow
async def test_example_service_counts_completions_per_device_and_outcome(
    kafka_bootstrap, topic_factory, tmp_path
):
    topic = topic_factory("completions")
    dead = completion_pb2.OUTCOME_DEAD_LETTERED
    produce(
        kafka_bootstrap,
        topic,
        [completion(f"m{i}", f"acme-{i % 3}") for i in range(30)]
        + [completion("d1", "acme-0", outcome=dead)]
        + [completion("m0", "acme-0")],  # a replay: not counted again
    )
    group = new_group(kafka_bootstrap)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(EXAMPLE),
        "--db",
        str(tmp_path / "counts.db"),
        "--group",
        group,
        "--bootstrap-servers",
        kafka_bootstrap,
        "--topic",
        topic,
        "--start",
        "earliest",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=ENV,
    )
    try:
        deadline = asyncio.get_running_loop().time() + 60
        while committed(kafka_bootstrap, group, topic) != [32]:
            assert asyncio.get_running_loop().time() < deadline, "not all committed"
            assert proc.returncode is None, (await proc.communicate())[1].decode()[-2000:]
            await asyncio.sleep(0.3)
        proc.send_signal(signal.SIGTERM)  # a graceful stop, as Kubernetes would send
        out, err = await asyncio.wait_for(proc.communicate(), 30)
    finally:
        if proc.returncode is None:
            proc.kill()
    assert proc.returncode == 0, err.decode()[-2000:]
    last = out.decode().strip().splitlines()[-1]
    assert json.loads(last) == {"handled": 31, "duplicate": 1, "parked": 0}
    with sqlite3.connect(tmp_path / "counts.db") as db:
        counts = db.execute("SELECT device_id, outcome, n FROM counts ORDER BY 1, 2").fetchall()
    assert counts == [
        ("acme-0", "DEAD_LETTERED", 1),
        ("acme-0", "ENRICHED", 10),
        ("acme-1", "ENRICHED", 10),
        ("acme-2", "ENRICHED", 10),
    ]
