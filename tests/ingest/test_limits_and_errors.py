"""Every limit and every error mapping, provoked against the real service."""

from __future__ import annotations

import dataclasses

import grpc
import pytest

from headwater.ingest.settings import IngestSettings
from headwater.proto.ingest.v1 import ingest_messages_pb2 as api
from headwater.runtime.env import SettingError
from headwater_dev.devstack.ports import free_port

from .conftest import bearer, details_of, device_message

INVALID = grpc.StatusCode.INVALID_ARGUMENT


async def test_batch_over_the_limit_is_rejected_with_bad_request(ingest_settings, start_ingest):
    running = await start_ingest(dataclasses.replace(ingest_settings, max_batch_messages=10))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await running.stub.PublishTelemetry(
            api.PublishTelemetryRequest(messages=[device_message() for _ in range(11)]),
            metadata=bearer(),
            timeout=10,
        )
    assert err.value.code() == INVALID
    details = details_of(err.value)
    assert details["ErrorInfo"].reason == "BATCH_SIZE_OUT_OF_RANGE"
    assert details["BadRequest"].field_violations[0].field == "messages"


async def test_empty_batch_is_rejected(ingest):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await ingest.stub.PublishAlarms(api.PublishAlarmsRequest(), metadata=bearer(), timeout=10)
    assert err.value.code() == INVALID


async def test_payload_over_the_configured_limit_is_a_per_message_error(
    ingest_settings, start_ingest
):
    running = await start_ingest(dataclasses.replace(ingest_settings, max_payload_bytes=1000))
    response = await running.stub.PublishTelemetry(
        api.PublishTelemetryRequest(
            messages=[device_message(payload=b"x" * 1000), device_message(payload=b"x" * 1001)]
        ),
        metadata=bearer(),
        timeout=10,
    )
    assert [r.code for r in response.results] == [0, INVALID.value[0]]
    assert response.results[1].error.reason == "PAYLOAD_TOO_LARGE"


async def test_payload_over_the_contract_limit_is_rejected(ingest):
    response = await ingest.stub.PublishTelemetry(
        api.PublishTelemetryRequest(messages=[device_message(payload=b"x" * (262_144 + 1))]),
        metadata=bearer(),
        timeout=10,
    )
    assert response.results[0].code == INVALID.value[0]
    assert response.results[0].error.field_violations[0].field == "payload"


@pytest.mark.parametrize(
    ("fields", "bad_field"),
    [
        ({"message_id": "x" * 65}, "message_id"),
        ({"device_id": "acme-" + "x" * 124}, "device_id"),
        ({"content_type": ""}, "content_type"),
        ({"content_type": "\x01bad"}, "content_type"),
        ({"attributes": {f"k{i}": "v" for i in range(33)}}, "attributes"),
        ({"attributes": {"k": "v" * 257}}, "attributes[k]"),
        ({"device_time": None}, "device_time"),
    ],
)
async def test_field_rules_from_the_contract_are_enforced(ingest, fields, bad_field):
    msg = device_message(**{k: v for k, v in fields.items() if v is not None})
    if fields.get("device_time", 1) is None:
        msg.ClearField("device_time")
    response = await ingest.stub.PublishTelemetry(
        api.PublishTelemetryRequest(messages=[msg]), metadata=bearer(), timeout=10
    )
    result = response.results[0]
    assert result.code == INVALID.value[0]
    assert [v.field for v in result.error.field_violations] == [bad_field]


async def test_request_over_the_max_request_size_is_resource_exhausted(
    ingest_settings, start_ingest
):
    running = await start_ingest(dataclasses.replace(ingest_settings, max_request_bytes=64 * 1024))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await running.stub.PublishTelemetry(
            api.PublishTelemetryRequest(messages=[device_message(payload=b"x" * 100_000)]),
            metadata=bearer(),
            timeout=10,
        )
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


async def test_overload_answers_resource_exhausted_with_a_retry_delay(
    ingest_settings, start_ingest
):
    running = await start_ingest(dataclasses.replace(ingest_settings, max_inflight_bytes=2048))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await running.stub.PublishTelemetry(
            api.PublishTelemetryRequest(messages=[device_message(payload=b"x" * 4096)]),
            metadata=bearer(),
            timeout=10,
        )
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    details = details_of(err.value)
    assert details["ErrorInfo"].reason == "OVERLOADED"
    assert details["RetryInfo"].retry_delay.ToMilliseconds() == 250
    assert details["QuotaFailure"].violations
    # The budget was released: a small call still fits.
    response = await running.stub.PublishTelemetry(
        api.PublishTelemetryRequest(messages=[device_message(payload=b"x")]),
        metadata=bearer(),
        timeout=10,
    )
    assert response.results[0].code == 0


async def test_unreachable_broker_answers_unavailable_with_retry_info(
    ingest_settings, start_ingest
):
    dead = dataclasses.replace(
        ingest_settings,
        kafka=dataclasses.replace(
            ingest_settings.kafka, bootstrap_servers=f"127.0.0.1:{free_port()}"
        ),
    )
    running = await start_ingest(dead, wait_ready=False)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await running.stub.PublishTelemetry(
            api.PublishTelemetryRequest(messages=[device_message()]), metadata=bearer(), timeout=5
        )
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    assert details_of(err.value)["RetryInfo"].retry_delay.ToMilliseconds() == 1000


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, "no gateway authentication configured"),
        ({"HEADWATER_INGEST_ALLOW_UNAUTHENTICATED": "maybe"}, "is not a boolean"),
        (
            {
                "HEADWATER_INGEST_ALLOW_UNAUTHENTICATED": "1",
                "HEADWATER_INGEST_MAX_PAYLOAD_BYTES": "999999",
            },
            "exceeds the contract",
        ),
        (
            {
                "HEADWATER_INGEST_ALLOW_UNAUTHENTICATED": "1",
                "HEADWATER_INGEST_MAX_BATCH_MESSAGES": "x",
            },
            "is not an integer",
        ),
        (
            {"HEADWATER_INGEST_ALLOW_UNAUTHENTICATED": "1", "HEADWATER_INGEST_TLS_CERT_FILE": "/c"},
            "set both",
        ),
        (
            {
                "HEADWATER_INGEST_ALLOW_UNAUTHENTICATED": "1",
                "HEADWATER_INGEST_MAX_INFLIGHT_BYTES": str(1024 * 1024),
            },
            "could never be admitted",
        ),
        (
            {"HEADWATER_INGEST_ALLOW_UNAUTHENTICATED": "1", "HEADWATER_INGEST_PRODUCER": "kafka"},
            "HEADWATER_INGEST_PRODUCER='kafka': use one of confluent, aiokafka",
        ),
        (
            {"HEADWATER_INGEST_ALLOW_UNAUTHENTICATED": "1", "HEADWATER_INGEST_EVENT_LOOP": "trio"},
            "HEADWATER_INGEST_EVENT_LOOP='trio': use one of uvloop, asyncio",
        ),
    ],
)
def test_bad_settings_are_refused_with_a_clear_message(env, message):
    with pytest.raises(SettingError, match=message):
        IngestSettings.from_env(env)


async def test_a_frame_id_longer_than_64_bits_is_refused_before_anything_is_written(ingest):
    """Issue 22: the answer echoing such an id cannot be built, so it must not be written."""
    from headwater import wire

    kept = device_message("acme-frame-id")
    too_long = wire.varint_field(1, 1 << 64) + wire.length_field(2, kept.SerializeToString())
    fine = wire.varint_field(1, (1 << 64) - 1) + wire.length_field(
        2, device_message("acme-frame-id").SerializeToString()
    )
    assert wire.stream_deserializer(too_long).error_field == "frame_id"
    call = ingest.channel.stream_stream(
        "/headwater.ingest.v1.IngestService/StreamTelemetry",
        request_serializer=lambda b: b,
        response_deserializer=api.StreamTelemetryResponse.FromString,
    )(metadata=bearer(), timeout=20)
    await call.write(too_long)
    refused = await call.read()
    assert refused.frame_id == 0
    (result,) = refused.results  # one error for the frame; its message was not written
    assert result.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert result.message_id != kept.message_id
    assert [v.field for v in result.error.field_violations] == ["frame_id"]
    # The stream goes on: the largest 64-bit id is answered and written.
    await call.write(fine)
    answer = await call.read()
    assert answer.frame_id == (1 << 64) - 1
    assert [r.code for r in answer.results] == [0]
    await call.done_writing()
