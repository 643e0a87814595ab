"""Issue 16: revocation reaches open streams, bad tokens files and fatal producer errors are loud.

Everything runs against a real in-process ingest server and the session's Kafka broker.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from pathlib import Path

import grpc
import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition
from grpc_health.v1 import health_pb2, health_pb2_grpc

from headwater import record_headers as rh
from headwater.endpoints import SERVICE_NAME
from headwater.proto.ingest.v1 import ingest_messages_pb2 as api
from headwater.topics import INGEST_TOPICS
from tests.support.ingest import TOKENS_YAML, bearer, details_of, device_message, publish

TOPIC = INGEST_TOPICS["telemetry"]
GW_A_ENTRY_END = 'devices: ["acme-*"]\n  - id: gw-b'
PERMISSION_DENIED = grpc.StatusCode.PERMISSION_DENIED.value[0]


def swap_tokens(path: Path, text: str | bytes) -> None:
    """Replace the tokens file atomically, as a Kubernetes Secret update does."""
    tmp = path.with_suffix(".new")
    if isinstance(text, bytes):
        tmp.write_bytes(text)
    else:
        tmp.write_text(text)
    tmp.replace(path)


def end_offsets(bootstrap: str) -> dict[int, int]:
    """Return the high watermark of every partition of the telemetry topic."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "test-offsets"})
    try:
        partitions = consumer.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions
        return {
            p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), 10)[1] for p in partitions
        }
    finally:
        consumer.close()


def message_ids_written_since(bootstrap: str, start: dict[int, int]) -> set[str]:
    """Return the message ids of telemetry records from ``start`` up to the end now."""
    end = end_offsets(bootstrap)
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "test-since", "enable.auto.commit": False}
    )
    ids: set[str] = set()
    try:
        left = {p: end[p] - start.get(p, 0) for p in end if end[p] > start.get(p, 0)}
        consumer.assign([TopicPartition(TOPIC, p, start.get(p, 0)) for p in left])
        deadline = time.monotonic() + 60  # only a hang fails it
        while any(left.values()):
            assert time.monotonic() < deadline, f"records missing: {left}"
            msg = consumer.poll(0.5)
            if msg is None or msg.error() or msg.offset() >= end[msg.partition()]:
                continue
            left[msg.partition()] -= 1
            ids.add(dict(msg.headers() or [])[rh.MESSAGE_ID].decode())
    finally:
        consumer.close()
    return ids


def frame(frame_id: int, *device_ids: str) -> api.StreamTelemetryRequest:
    return api.StreamTelemetryRequest(
        frame_id=frame_id, messages=[device_message(d) for d in device_ids]
    )


async def wait_past_reload_check() -> None:
    """Sleep past the tokens store's once-a-second check, so the next call re-reads."""
    await asyncio.sleep(1.2)


@pytest.mark.parametrize(
    ("tokens", "reason"),
    [
        (
            TOKENS_YAML.replace(
                GW_A_ENTRY_END, GW_A_ENTRY_END.replace("\n", "\n    revoked: true\n", 1), 1
            ),
            "REVOKED_CREDENTIALS",
        ),
        (TOKENS_YAML.replace("token_sha256:", "token_sha256_removed:", 1), "INVALID_TOKEN"),
    ],
    ids=["revoked", "removed"],
)
async def test_revocation_ends_an_open_stream_at_the_next_frame(
    ingest, tokens_file, kafka_bootstrap, tokens, reason
):
    assert tokens != TOKENS_YAML
    device = f"acme-rev-{uuid.uuid4().hex[:8]}"
    call = ingest.stub.StreamTelemetry(metadata=bearer("gw-a"), timeout=30)
    first = frame(1, device)
    await call.write(first)
    answer = await asyncio.wait_for(call.read(), 10)
    assert answer.results[0].code == 0  # the stream works before the change

    swap_tokens(tokens_file, tokens)
    await wait_past_reload_check()
    start = end_offsets(kafka_bootstrap)
    after = frame(2, device)
    await call.write(after)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await asyncio.wait_for(call.read(), 10)
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert details_of(err.value)["ErrorInfo"].reason == reason
    written = message_ids_written_since(kafka_bootstrap, start)
    assert after.messages[0].message_id not in written


async def test_binding_change_denies_a_device_on_an_open_stream(
    ingest, tokens_file, kafka_bootstrap
):
    suffix = uuid.uuid4().hex[:8]
    dropped, kept = f"acme-drop-{suffix}", f"acme-keep-{suffix}"
    call = ingest.stub.StreamTelemetry(metadata=bearer("gw-a"), timeout=30)
    await call.write(frame(1, dropped))
    assert (await asyncio.wait_for(call.read(), 10)).results[0].code == 0

    swap_tokens(tokens_file, TOKENS_YAML.replace('["acme-*"]', '["acme-keep-*"]', 1))
    await wait_past_reload_check()
    start = end_offsets(kafka_bootstrap)
    after = frame(2, dropped, kept)
    await call.write(after)
    answer = await asyncio.wait_for(call.read(), 10)
    assert [r.code for r in answer.results] == [PERMISSION_DENIED, 0]
    assert "not bound to device" in answer.results[0].error.message
    await call.done_writing()
    assert await call.code() == grpc.StatusCode.OK  # the stream itself goes on
    written = message_ids_written_since(kafka_bootstrap, start)
    assert after.messages[0].message_id not in written
    assert after.messages[1].message_id in written


async def test_a_tokens_file_that_is_not_utf8_keeps_the_previous_table(ingest, tokens_file, caplog):
    caplog.set_level(logging.ERROR, logger="headwater.ingest.admission.auth")
    revoked = TOKENS_YAML.replace(
        GW_A_ENTRY_END, GW_A_ENTRY_END.replace("\n", "\n    revoked: true\n", 1), 1
    )
    # A valid file that revokes gw-a, but for one byte that is not UTF-8 (in a comment).
    swap_tokens(tokens_file, b"# caf\xe9\n" + revoked.encode())
    await wait_past_reload_check()
    for _ in range(2):  # the first call re-reads the file, the second sees the table kept
        assert (await publish(ingest.stub, metadata=bearer("gw-a"))).results[0].code == 0
    logged = [r for r in caplog.records if "cannot reload the gateway tokens file" in r.message]
    assert logged, "the reason was not logged"
    assert "UnicodeDecodeError" in logged[0].error

    swap_tokens(tokens_file, revoked)  # fixed: the new table applies
    await wait_past_reload_check()
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await publish(ingest.stub, metadata=bearer("gw-a"))
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def next_status(watch) -> int:
    return (await asyncio.wait_for(watch.read(), 15)).status


async def test_fatal_producer_error_goes_not_serving_and_replaces_the_producer(ingest, read_record):
    writer = ingest.server.writer
    old_producer = writer._producer
    health = health_pb2_grpc.HealthStub(ingest.channel)
    watch = health.Watch(health_pb2.HealthCheckRequest(service=SERVICE_NAME), timeout=30)
    assert await next_status(watch) == health_pb2.HealthCheckResponse.SERVING

    # librdkafka serves error_cb from the poll thread: inject the fatal error there too.
    fatal = KafkaError(KafkaError._FATAL, "injected: idempotent producer fatal error", fatal=True)
    await asyncio.to_thread(writer.error_callback, fatal)
    assert not writer.connected  # calls are refused UNAVAILABLE from this moment

    assert await next_status(watch) == health_pb2.HealthCheckResponse.NOT_SERVING
    assert await next_status(watch) == health_pb2.HealthCheckResponse.SERVING
    watch.cancel()
    assert writer.connected
    assert writer._producer is not None and writer._producer is not old_producer

    answer = await publish(ingest.stub, metadata=bearer("gw-a"))
    result = answer.results[0]
    assert result.code == 0
    record = read_record(TOPIC, result.partition, result.offset)
    assert dict(record.headers())[rh.MESSAGE_ID].decode() == result.message_id


async def test_a_non_fatal_client_error_changes_nothing(ingest):
    writer = ingest.server.writer
    producer = writer._producer
    await asyncio.to_thread(
        writer.error_callback, KafkaError(KafkaError._TRANSPORT, "injected: broker hiccup")
    )
    await asyncio.sleep(0.3)
    health = health_pb2_grpc.HealthStub(ingest.channel)
    check = await health.Check(health_pb2.HealthCheckRequest(service=SERVICE_NAME), timeout=5)
    assert check.status == health_pb2.HealthCheckResponse.SERVING
    assert writer.connected and writer._producer is producer
    assert (await publish(ingest.stub, metadata=bearer("gw-a"))).results[0].code == 0
