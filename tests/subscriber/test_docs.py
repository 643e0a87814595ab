"""The Python examples in docs/subscribe.md run as written against the real broker."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from pathlib import Path

import pytest

from headwater.proto.events.v1 import completion_pb2, event_pb2

from .conftest import TEST_SESSION_TIMEOUT_S, new_group, produce

pytestmark = pytest.mark.slow
DOC = Path(__file__).parents[2] / "docs" / "subscribe.md"


def _blocks() -> dict[str, str]:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    by_decoder = {
        name: [b for b in blocks if f", {name}\n" in b or f"    {name},\n" in b]
        for name in ("decode_completion", "decode_event")
    }
    assert len(blocks) == 2 and all(len(v) == 1 for v in by_decoder.values()), by_decoder
    return {name: found[0] for name, found in by_decoder.items()}


async def _run_block(
    block: str, workdir: Path, env: dict[str, str], expected_lines: int
) -> tuple[list[str], str]:
    """Run ``block`` in ``workdir`` until it printed ``expected_lines``, then SIGTERM it."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        block,
        cwd=workdir,
        env=os.environ
        | {
            "HEADWATER_SUBSCRIBER_START": "earliest",  # these groups are new
            "HEADWATER_SUBSCRIBER_SESSION_TIMEOUT_SECONDS": str(TEST_SESSION_TIMEOUT_S),
        }
        | env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout and proc.stderr
    lines: list[str] = []
    try:
        while len(lines) < expected_lines:
            line = await asyncio.wait_for(proc.stdout.readline(), 60)
            if not line:
                err = await proc.stderr.read()
                raise AssertionError(f"exited early: {lines} {err.decode()[-2000:]}")
            lines.append(line.decode().strip())
        proc.send_signal(signal.SIGTERM)
        out, err = await asyncio.wait_for(proc.communicate(), 30)
    finally:
        if proc.returncode is None:
            proc.kill()
    assert proc.returncode == 0, err.decode()[-2000:]
    return lines, out.decode().strip()


async def test_the_examples_run(kafka_bootstrap, topic_factory, tmp_path):
    blocks = _blocks()
    completions = topic_factory("completions")
    enriched = completion_pb2.OUTCOME_ENRICHED

    def done(i: int) -> bytes:
        return completion_pb2.Completion(
            message_id=f"m{i}",
            device_id="acme-1",
            outcome=enriched,
            attempt=1,
            source=completion_pb2.SourceRecord(topic="ingest.telemetry.v1", offset=i),
            events=[completion_pb2.EventRef(event_id=f"e-m{i}", topic="events.telemetry.v1")],
        ).SerializeToString()

    produce(kafka_bootstrap, completions, [done(0), done(1), done(0), done(2)])  # a replay
    telemetry, alarms = topic_factory("events.telemetry"), topic_factory("events.alarm")

    def reading(event_id: str, value: float) -> bytes:
        return event_pb2.Event(
            event_id=event_id,
            device_id="acme-1",
            event_type="telemetry",
            measurements=[
                event_pb2.Measurement(name="temperature", value=value, unit="celsius"),
                event_pb2.Measurement(name="humidity", value=40.0, unit="percent"),
            ],
        ).SerializeToString()

    produce(
        kafka_bootstrap, telemetry, [reading("t1", 21.5), reading("t1", 21.5), reading("t2", 22)]
    )
    alarm = event_pb2.Event(
        event_id="a1",
        device_id="acme-2",
        event_type="alarm",
        alarm=event_pb2.Alarm(code="E42", severity=event_pb2.SEVERITY_CRITICAL),
    )
    produce(kafka_bootstrap, alarms, [alarm.SerializeToString()])

    (tmp_path / "completions").mkdir()
    (tmp_path / "events").mkdir()
    (c_lines, c_last), (e_lines, e_last) = await asyncio.gather(
        _run_block(
            blocks["decode_completion"],
            tmp_path / "completions",
            {
                "HEADWATER_KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
                "HEADWATER_SUBSCRIBER_GROUP_ID": new_group(kafka_bootstrap),
                "HEADWATER_SUBSCRIBER_TOPICS": completions,
            },
            3,
        ),
        _run_block(
            blocks["decode_event"],
            tmp_path / "events",
            {
                "HEADWATER_KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
                "HEADWATER_SUBSCRIBER_GROUP_ID": new_group(kafka_bootstrap),
                "HEADWATER_SUBSCRIBER_TOPICS": f"{telemetry},{alarms}",
            },
            3,
        ),
    )
    assert c_lines == [f"acme-1 m{i} OUTCOME_ENRICHED ['e-m{i}']" for i in range(3)]
    assert c_last == "{'handled': 3, 'duplicate': 1, 'parked': 0}"
    assert (tmp_path / "completions" / "handled.db").exists()  # the SQLite dedup store
    assert sorted(e_lines) == ["alarm a1 acme-2", "telemetry t1 acme-1", "telemetry t2 acme-1"]
    # Two telemetry events of two measurements each; the alarm has none.
    assert e_last == "{'handled': 3, 'duplicate': 1, 'parked': 0} 4"
