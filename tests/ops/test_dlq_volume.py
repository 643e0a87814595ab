"""``headwater dlq`` at volume (issue 35): bounded memory, progress, a redrive run once.

Dead letters of ~3.5 KB each (the size seen in the field) are written to a fresh topic,
then listed and redriven through the real commands. The main suite runs 5,000; the
``slow`` run is the target of docs/benchmarks.md: 200,000 letters, ``dlq list`` under
200 MB RSS, a redrive that reports progress, and a second run that selects 0.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from headwater.proto.device.v1 import device_message_pb2
from headwater.proto.events.v1 import completion_pb2, dead_letter_pb2

INGEST = "ingest.telemetry.v1"
RSS_LIMIT_MB = 200


@dataclass(frozen=True)
class Run:
    """One command's exit code, output line count, stderr, peak RSS and wall time."""

    returncode: int
    lines: int
    stderr: str
    rss_mb: float
    seconds: float


#: Runs a command and writes its peak RSS (KiB) to argv[1]. A small launcher: a child's
#: ru_maxrss starts at its parent's RSS when forked, and pytest's is large after writing
#: the letters; this launcher's is a few MB.
_LAUNCHER = (
    "import resource, subprocess, sys; code = subprocess.call(sys.argv[2:]); "
    "open(sys.argv[1], 'w').write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)); "
    "sys.exit(code)"
)


def _command(tmp_path: Path, *args: str) -> Run:
    """Run ``headwater`` with ``args``; stdout goes to a file (only its lines are counted)."""
    out, err, rss = tmp_path / "out", tmp_path / "err", tmp_path / "rss"
    started = time.monotonic()
    with out.open("wb") as stdout, err.open("wb") as stderr:
        returncode = subprocess.call(
            [
                sys.executable,
                "-c",
                _LAUNCHER,
                str(rss),
                sys.executable,
                "-m",
                "headwater.cli",
                *args,
            ],
            stdout=stdout,
            stderr=stderr,
        )
    with out.open("rb") as lines:
        count = sum(1 for _ in lines)
    return Run(
        returncode,
        count,
        err.read_text(),
        int(rss.read_text()) / 1024,  # KiB on Linux
        time.monotonic() - started,
    )


def _ends(bootstrap: str) -> dict[int, int]:
    """The ingest topic's end offset per partition, once its leaders are elected.

    Its partitions are counted, not assumed: another test may have created the topic first.
    """
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "volume-test"})
    deadline = time.monotonic() + 60
    try:
        while True:
            try:
                partitions = consumer.list_topics(INGEST, timeout=10).topics[INGEST].partitions
                return {
                    p: consumer.get_watermark_offsets(TopicPartition(INGEST, p), timeout=10)[1]
                    for p in partitions
                }
            except KafkaException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
    finally:
        consumer.close()


def _write_letters(bootstrap: str, topic: str, count: int) -> None:
    """Write ``count`` dead letters of one fresh tenant, sourced past the ingest topic's end."""
    run_id = uuid.uuid4().hex[:8]
    ends = _ends(bootstrap)
    partitions = len(ends)
    payload = b"{" + b'"t": 21.5, ' * 320 + b"}"  # ~3.5 KB, like a real letter
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 50, "compression.type": "lz4"}
    )
    for i in range(count):
        device, message_id, partition = f"dev-{i % 97}", f"m-{run_id}-{i}", i % partitions
        letter = dead_letter_pb2.DeadLetter(
            message_id=message_id,
            device_id=device,
            source=completion_pb2.SourceRecord(
                topic=INGEST, partition=partition, offset=ends[partition] + i // partitions
            ),
            original_value=device_message_pb2.DeviceMessage(
                message_id=message_id, device_id=device, payload=payload
            ).SerializeToString(),
            original_headers=[
                dead_letter_pb2.Header(key="message-id", value=message_id.encode()),
                dead_letter_pb2.Header(key="tenant", value=f"t-{run_id}".encode()),
            ],
            stage="normalize",
            reason="PAYLOAD_INVALID",
            error_class="ValueError",
            error_message="temp: 'x' is not a number",
            attempts=1,
        )
        while True:
            try:
                producer.produce(topic, letter.SerializeToString(), device.encode())
                break
            except BufferError:
                producer.poll(0.5)
        producer.poll(0)
    assert producer.flush(120) == 0


def _volume(bootstrap: str, topic: str, tmp_path: Path, count: int) -> dict[str, Run]:
    _write_letters(bootstrap, topic, count)
    every = str(count // 4)
    common = ("--bootstrap-servers", bootstrap, "--topic", topic, "--progress-every", every)
    redrive = ("dlq", "redrive", *common, "--why", "volume test", "--json")
    runs = {
        "list": _command(tmp_path, "dlq", "list", *common),
        "redrive": _command(tmp_path, *redrive, "--execute"),
        "again": _command(tmp_path, *redrive),
    }
    for name, run in runs.items():
        assert run.returncode == 0, (name, run.stderr[-2000:])
        print(f"{name}: {run.rss_mb:.0f} MB RSS, {run.seconds:.1f} s, {run.lines} lines")

    assert runs["list"].lines == count + 1  # the header
    assert runs["list"].rss_mb < RSS_LIMIT_MB
    assert runs["list"].stderr.count("dead letters read") == 4  # at 1/4, 2/4, 3/4, 4/4

    sent = runs["redrive"]
    assert sent.lines == count
    assert f"sent {count}; {count} selected" in sent.stderr
    assert sent.stderr.count(": redriven ") == 4

    again = runs["again"]
    assert "records checked for redrives" in again.stderr  # the redrives just written
    assert f"would send 0 (add --execute); {count} skipped as redriven already" in again.stderr
    return runs


def test_5000_dead_letters_stream_with_progress_and_redrive_once(
    kafka_bootstrap, topic_factory, ingest_topics, tmp_path
):
    _volume(kafka_bootstrap, topic_factory("dlq-volume"), tmp_path, 5_000)


@pytest.mark.load  # the 5,000 above is the suite's; this one runs after it (make test-load)
@pytest.mark.timeout(3600)
def test_200000_dead_letters_stay_under_200_mb(
    kafka_bootstrap, topic_factory, ingest_topics, tmp_path
):
    _volume(kafka_bootstrap, topic_factory("dlq-volume"), tmp_path, 200_000)
