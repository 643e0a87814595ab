"""Each endpoint and call style against the real broker: results, key, headers, bytes.

Every test runs with both produce clients (``HEADWATER_INGEST_PRODUCER``).
"""

from __future__ import annotations

import asyncio
import dataclasses

import grpc
import pytest

from headwater.ingest.settings import PRODUCERS, IngestSettings
from headwater.proto.ingest.v1 import ingest_messages_pb2 as api

from .conftest import bearer, device_message


@pytest.fixture(params=PRODUCERS)
def ingest_settings(
    ingest_settings: IngestSettings, request: pytest.FixtureRequest
) -> IngestSettings:
    return dataclasses.replace(ingest_settings, producer=request.param)


@pytest.mark.parametrize(
    ("method", "request_type", "topic"),
    [
        ("PublishTelemetry", api.PublishTelemetryRequest, "ingest.telemetry.v1"),
        ("PublishAlarms", api.PublishAlarmsRequest, "ingest.alarms.v1"),
    ],
)
async def test_batch_publish_writes_exact_bytes_key_and_headers(
    ingest, read_record, method, request_type, topic
):
    messages = [device_message(f"acme-{i:03d}", attributes={"line": "3"}) for i in range(5)]
    response = await getattr(ingest.stub, method)(
        request_type(messages=messages), metadata=bearer("gw-a"), timeout=10
    )
    assert [r.code for r in response.results] == [0] * 5
    assert [r.message_id for r in response.results] == [m.message_id for m in messages]
    for msg, result in zip(messages, response.results, strict=True):
        record = read_record(topic, result.partition, result.offset)
        assert record.value() == msg.SerializeToString()
        assert record.key() == msg.device_id.encode()
        headers = dict(record.headers())
        assert headers["message-id"] == msg.message_id.encode()
        assert headers["gateway-id"] == b"gw-a"
        assert headers["tenant"] == b"acme"
        assert headers["content-type"] == msg.content_type.encode()
        assert headers["endpoint"] in (b"telemetry", b"alarms")
        assert int(headers["received-at-ms"]) > 1_700_000_000_000
        assert headers["traceparent"].startswith(b"00-")


async def test_raw_bytes_are_not_reencoded(ingest, read_record):
    """Unknown fields and field order survive: the value is the gateway's bytes."""
    msg = device_message()
    # Field 99 (unknown to the contract) appended by a newer gateway: must be kept.
    raw = msg.SerializeToString() + b"\x9a\x06\x03abc"
    request = b"".join([b"\x0a", _varint(len(raw)), raw])
    call = ingest.channel.unary_unary(
        "/headwater.ingest.v1.IngestService/PublishTelemetry",
        request_serializer=lambda b: b,
        response_deserializer=api.PublishTelemetryResponse.FromString,
    )
    response = await call(request, metadata=bearer(), timeout=10)
    result = response.results[0]
    assert result.code == 0
    assert read_record("ingest.telemetry.v1", result.partition, result.offset).value() == raw


async def test_mixed_batch_one_bad_message_never_fails_its_neighbours(ingest, read_record):
    good1 = device_message("acme-1")
    bad_id = device_message("acme-2", message_id="has spaces!")
    foreign = device_message("globex-9")  # gw-a is not bound to globex devices
    empty_payload = device_message("acme-3", payload=b"")
    good2 = device_message("acme-4")
    response = await ingest.stub.PublishTelemetry(
        api.PublishTelemetryRequest(messages=[good1, bad_id, foreign, empty_payload, good2]),
        metadata=bearer(),
        timeout=10,
    )
    codes = [grpc.StatusCode.OK.value[0]] * 5
    codes[1] = codes[3] = grpc.StatusCode.INVALID_ARGUMENT.value[0]
    codes[2] = grpc.StatusCode.PERMISSION_DENIED.value[0]
    assert [r.code for r in response.results] == codes
    assert response.results[1].error.field_violations[0].field == "message_id"
    assert response.results[2].error.reason == "DEVICE_NOT_PERMITTED"
    assert response.results[3].error.field_violations[0].field == "payload"
    assert not response.results[1].error.retriable
    for i in (0, 4):
        r = response.results[i]
        assert read_record("ingest.telemetry.v1", r.partition, r.offset).key() == (
            b"acme-1" if i == 0 else b"acme-4"
        )


async def test_stream_answers_every_frame_with_one_result_per_message(ingest, read_record):
    frames = [
        api.StreamTelemetryRequest(
            frame_id=i, messages=[device_message(f"acme-{i}-{j}") for j in range(3)]
        )
        for i in range(20)
    ]

    async def requests():
        for frame in frames:
            yield frame

    answers = [
        a async for a in ingest.stub.StreamTelemetry(requests(), metadata=bearer(), timeout=20)
    ]
    assert sorted(a.frame_id for a in answers) == list(range(20))
    by_frame = {a.frame_id: a for a in answers}
    for frame in frames:
        results = by_frame[frame.frame_id].results
        assert [r.message_id for r in results] == [m.message_id for m in frame.messages]
        assert all(r.code == 0 for r in results)
    last = by_frame[19].results[2]
    assert read_record("ingest.telemetry.v1", last.partition, last.offset).value() == (
        frames[19].messages[2].SerializeToString()
    )


async def test_alarm_stream_and_per_message_errors_inside_a_frame(ingest):
    async def requests():
        yield api.StreamAlarmsRequest(
            frame_id=7, messages=[device_message(), device_message(device_id="")]
        )

    answers = [a async for a in ingest.stub.StreamAlarms(requests(), metadata=bearer(), timeout=10)]
    assert len(answers) == 1
    assert [r.code for r in answers[0].results] == [0, grpc.StatusCode.INVALID_ARGUMENT.value[0]]


async def test_concurrent_single_message_calls(ingest):
    async def one(i: int) -> int:
        response = await ingest.stub.PublishTelemetry(
            api.PublishTelemetryRequest(messages=[device_message(f"acme-{i}")]),
            metadata=bearer(),
            timeout=10,
        )
        return response.results[0].code

    assert await asyncio.gather(*(one(i) for i in range(64))) == [0] * 64


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


async def test_gateway_trace_context_reaches_the_record_headers(ingest, read_record):
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    metadata = [*bearer(), ("traceparent", f"00-{trace_id}-00f067aa0ba902b7-01")]
    response = await ingest.stub.PublishTelemetry(
        api.PublishTelemetryRequest(messages=[device_message()]), metadata=metadata, timeout=10
    )
    r = response.results[0]
    headers = dict(read_record("ingest.telemetry.v1", r.partition, r.offset).headers())
    version, header_trace, span_id, flags = headers["traceparent"].decode().split("-")
    assert (version, header_trace, flags) == ("00", trace_id, "01")
    assert span_id != "00f067aa0ba902b7"  # the producer span's own id, a child of the call
