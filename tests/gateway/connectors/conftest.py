"""Connector tests: the edge broker (a real Mosquitto per test), the command tests'
fixtures (per-test command topics, ingest replicas serving commands), INFO logs of the
gateway (tests wait for its "subscribed" lines), and where the ingest topics ended when a
test began (``support.ingested`` reads from there)."""

import logging

import pytest

from tests.commands.conftest import (  # noqa: F401 (fixtures)
    command_topics,
    reports_topic,
    start_command_ingest,
)
from tests.gateway.connectors import support
from tests.support.mosquitto import mosquitto  # noqa: F401 (a fixture)


@pytest.fixture(autouse=True)
def _gateway_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "headwater.gateway")


@pytest.fixture(autouse=True)
def _ingest_topic_ends(request: pytest.FixtureRequest) -> None:
    """Mark the ingest topics' ends for a test that talks to Kafka (see ``support.ingested``)."""
    support.BEGAN.clear()
    if "kafka_bootstrap" in request.fixturenames:
        support.mark_ends(request.getfixturevalue("kafka_bootstrap"))
