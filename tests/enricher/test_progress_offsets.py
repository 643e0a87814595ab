"""The enricher's progress, committed to a consumer group for monitoring, and `headwater lag`.

A short real query on the real broker: after its batches commit, the progress group holds
the checkpoint's offsets, `headwater lag` shows them per partition by default, and
`headwater lag --checkpoint` reads the same position from the checkpoint once the query
is down, with the lag of what arrived since.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException

from headwater.enricher.driver.progress_offsets import (
    ProgressOffsetsListener,
    end_offsets,
    from_settings,
)
from headwater.enricher.driver.settings import EnricherSettings
from headwater.ops.checkpoint import CheckpointError, read_checkpoint
from headwater.ops.lag import group_lag
from headwater.ops.offsets import admin_client
from tests.support.kafkatools import (
    ACME,
    Msg,
    acme,
    ingest,
    make_topics,
    masters,
    start_enricher,
)


def test_end_offsets_merges_kafka_sources_and_skips_the_rest() -> None:
    got = end_offsets(
        [
            json.dumps({"ingest.telemetry.v1": {"0": 12, "1": 7}}),
            json.dumps({"master.devices.v1": {"0": 3}}),
            None,
            "not json",
            json.dumps({"logOffset": 4}),  # another kind of source
            json.dumps({"t": {"0": -1}}),  # Spark's "latest" marker, not a position
        ]
    )
    assert got == {
        ("ingest.telemetry.v1", 0): 12,
        ("ingest.telemetry.v1", 1): 7,
        ("master.devices.v1", 0): 3,
    }


def test_a_failed_commit_is_retried_and_never_reaches_the_query() -> None:
    calls: list[dict[tuple[str, int], int]] = []

    def commit(group: str, offsets: dict[tuple[str, int], int]) -> None:
        calls.append(offsets)
        if len(calls) == 1:
            raise RuntimeError("broker away")

    listener = ProgressOffsetsListener("g", commit)
    listener.offer({("t", 0): 1})  # fails once, is tried again
    assert listener.flush(5)
    assert listener.committed == {("t", 0): 1}
    listener.offer({("t", 0): 2})
    listener.close(5)
    assert calls == [{("t", 0): 1}, {("t", 0): 1}, {("t", 0): 2}]
    assert listener.committed == {("t", 0): 2}


def _cli(*args: str, env: dict[str, str] | None = None) -> list[dict[str, Any]]:
    result = subprocess.run(
        [sys.executable, "-m", "headwater.cli", *args, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env=os.environ | (env or {}),
    )
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


@pytest.mark.spark
@pytest.mark.slow
def test_lag_shows_the_enricher_from_its_group_and_from_its_checkpoint(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    # `headwater enricher run` in its own process: the listener is registered by the runner,
    # as in production (a py4j callback server inside the test process is not needed).
    topics = make_topics(kafka_bootstrap)
    group = f"enricher-progress-{uuid.uuid4().hex[:8]}"
    checkpoint = str(tmp_path / "cp")
    masters(kafka_bootstrap, topics, ["dev-0", "dev-1", "dev-2"])
    msgs = [Msg(f"m{i}", f"dev-{i % 3}", ACME, acme(20 + i, 40), i + 1) for i in range(12)]
    ingest(kafka_bootstrap, topics, msgs)
    admin = admin_client(kafka_bootstrap)
    end = _log_ends(admin, topics.ingest[0])
    _warm_up_coordinator(kafka_bootstrap, group, topics.ingest[0])
    enricher = start_enricher(
        kafka_bootstrap, topics, tmp_path, "enricher.log", PROGRESS_GROUP=group
    )
    try:
        deadline = time.monotonic() + 240  # batch 0 plans the state store: slow on a busy box
        # Every partition of the telemetry topic read and its batch committed.
        while not _checkpoint_reached(checkpoint, end):
            assert enricher.poll() is None, "the enricher exited early"
            assert time.monotonic() < deadline, "the query did not get through the input"
            time.sleep(0.5)
        while {k: v for k, v in _group(admin, group).items() if k in end} != end:
            assert time.monotonic() < deadline, f"the group has {_group(admin, group)}"
            time.sleep(0.3)
    finally:
        enricher.send_signal(signal.SIGTERM)  # graceful: the last commit is flushed
        enricher.communicate(timeout=90)
        os.killpg(enricher.pid, signal.SIGKILL)  # whatever is left of the group
    cp = {
        (r["topic"], r["partition"]): r["next_offset"] for r in read_checkpoint(checkpoint).rows()
    }
    assert _group(admin, group) == cp, "the group holds exactly the checkpoint's position"
    # By default `headwater lag` shows the enricher's progress group, per partition.
    rows = _cli(
        "lag",
        "--bootstrap-servers",
        kafka_bootstrap,
        env={"HEADWATER_ENRICHER_PROGRESS_GROUP": group},
    )
    parts = {(r["topic"], r["partition"]): r for r in rows if "partition" in r}
    assert {k: r["committed"] for k, r in parts.items()} == cp
    assert all(r["lag"] == 0 for r in parts.values())
    assert rows[-1] == {"group": group, "max_offset_lag": 0}
    # The enricher is down; three more messages arrive: the checkpoint shows them as lag.
    late = [Msg(f"late-{i}", "dev-1", ACME, acme(1, 2), 50 + i) for i in range(3)]
    ingest(kafka_bootstrap, topics, late)
    rows = _cli("lag", "--bootstrap-servers", kafka_bootstrap, "--checkpoint", checkpoint)
    parts = {(r["topic"], r["partition"]): r for r in rows if "partition" in r}
    assert {k: r["committed"] for k, r in parts.items()} == cp
    assert sum(r["lag"] for r in parts.values()) == 3
    assert rows[-1] == {
        "group": f"checkpoint:{checkpoint}",
        "max_offset_lag": max(r["lag"] for r in parts.values()),
    }


def _warm_up_coordinator(bootstrap: str, group: str, topic: str) -> None:
    """Commit once with a consumer, which waits out the group coordinator's loading.

    librdkafka 2.16's admin client crashes the process when listing a group's offsets
    gets "coordinator load in progress" (a fresh broker); the enricher's commits replace
    this offset.
    """
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    consumer.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    consumer.close()


def _group(admin: Any, group: str) -> dict[tuple[str, int], int]:
    """The group's committed offsets; empty while a fresh broker still loads its coordinator."""
    try:
        lag = group_lag(admin, group)
    except KafkaException:
        return {}
    return {(p.topic, p.partition): p.committed for p in lag.partitions if p.committed is not None}


def _checkpoint_reached(checkpoint: str, end: dict[tuple[str, int], int]) -> bool:
    """True once the checkpoint's last committed batch ends at ``end`` in every partition."""
    try:
        rows = read_checkpoint(checkpoint).rows()
    except CheckpointError:  # the query has not planned its first batch yet
        return False
    at = {(r["topic"], r["partition"]): r["next_offset"] for r in rows}
    return all(at.get(k, -1) >= v for k, v in end.items())


def _log_ends(admin: Any, topic: str) -> dict[tuple[str, int], int]:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import OffsetSpec

    from headwater.ops.offsets import log_offsets

    meta = admin.list_topics(timeout=10).topics[topic]
    return log_offsets(
        admin, [TopicPartition(topic, p) for p in meta.partitions], OffsetSpec.latest()
    )


def test_the_progress_group_can_be_turned_off() -> None:
    off = EnricherSettings.from_env({"HEADWATER_ENRICHER_PROGRESS_GROUP": "off"})
    assert from_settings(dataclasses.replace(off)) is None
    assert EnricherSettings.from_env({}).progress_group == "headwater-enricher"
