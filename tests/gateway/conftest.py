"""Gateway tests run against the real ingest service on the session broker; what they look
for in the (shared) ingest topics is read from where the topics ended when the test began."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.metrics import Meter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from headwater import record_headers as rh
from headwater.gateway.config import GatewayConfig
from headwater.proto.device.v1 import device_message_pb2
from headwater.topics import INGEST_TOPICS
from tests.support.ingest import TOKENS
from tests.support.kafkatools import INGEST_BEGAN, mark_ingest_ends, read_ingest_since_test_began

CT = "application/vnd.acme.telemetry.v1+json"


@pytest.fixture(autouse=True)
def _ingest_topic_ends(request: pytest.FixtureRequest) -> Iterator[None]:
    """Mark where the ingest topics end, for a test that talks to Kafka (see kafkatools)."""
    if "kafka_bootstrap" in request.fixturenames:
        mark_ingest_ends(request.getfixturevalue("kafka_bootstrap"))
    yield
    INGEST_BEGAN.clear()


def config(target: str, **kw: Any) -> GatewayConfig:
    """A client config for tests: gw-a's token, short deadlines and backoff."""
    base = GatewayConfig(
        target=target,
        token=TOKENS["gw-a"],
        call_timeout_s=3.0,
        backoff_initial_s=0.05,
        backoff_max_s=0.5,
    )
    return dataclasses.replace(base, **kw)


def in_kafka(bootstrap: str, endpoint: str, ids: set[str]) -> set[str]:
    """Return which of ``ids`` are in the endpoint's ingest topic (see :func:`kafka_copies`)."""
    return set(kafka_copies(bootstrap, endpoint, ids, stop_when_all_found=True))


def kafka_copies(
    bootstrap: str, endpoint: str, ids: set[str], stop_when_all_found: bool = False
) -> dict[str, list[device_message_pb2.DeviceMessage]]:
    """Return every copy of the messages ``ids`` in the endpoint's ingest topic, by id.

    The topic is shared by every test that runs a server on the session broker, and others
    write to it too (a redrive test, say): records are picked by their ``message-id`` header
    first, and only ours are decoded. Reads what the running test's time added, to the end
    of the topic, or stops once each id was seen (``stop_when_all_found``).
    """
    found: dict[str, list[device_message_pb2.DeviceMessage]] = {}
    for record in read_ingest_since_test_began(bootstrap, INGEST_TOPICS[endpoint]):
        headers: dict[str, bytes] = dict(record.headers() or [])  # type: ignore[arg-type]
        message_id = headers.get(rh.MESSAGE_ID, b"").decode("utf-8", "replace")
        if message_id not in ids:
            continue
        msg = device_message_pb2.DeviceMessage.FromString(record.value())
        assert msg.message_id == message_id, "the header names another message than the value"
        found.setdefault(message_id, []).append(msg)
        if stop_when_all_found and len(found) == len(ids):
            break
    return found


def new_meter() -> tuple[InMemoryMetricReader, Meter]:
    """A meter of its own, read in memory (the global provider is shared by every test)."""
    reader = InMemoryMetricReader()
    return reader, MeterProvider(metric_readers=[reader]).get_meter("test")


def metric_points(reader: InMemoryMetricReader) -> dict[tuple[str, tuple[Any, ...]], Any]:
    """Collect once: {(instrument name, sorted attributes): value (histograms: count)}."""
    data = reader.get_metrics_data()
    return {
        (m.name, tuple(sorted(p.attributes.items()))): getattr(p, "value", getattr(p, "count", 0))
        for rm in (data.resource_metrics if data else [])
        for sm in rm.scope_metrics
        for m in sm.metrics
        for p in m.data.data_points
    }
