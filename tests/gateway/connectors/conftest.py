"""Connector tests: the edge broker (a real Mosquitto per test), the command tests'
fixtures (per-test command topics, ingest replicas serving commands), and INFO logs of the
gateway (tests wait for its "subscribed" lines)."""

import logging

import pytest

from tests.commands.conftest import (  # noqa: F401 (fixtures)
    command_topics,
    reports_topic,
    start_command_ingest,
)
from tests.support.mosquitto import mosquitto  # noqa: F401 (a fixture)


@pytest.fixture(autouse=True)
def _gateway_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "headwater.gateway")
