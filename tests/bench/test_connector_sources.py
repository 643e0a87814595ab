"""The gateway-connectors bench's sources in processes of their own: a source that cannot
start fails the phase in one line, not a wait until the phase's bound."""

from __future__ import annotations

import time

import pytest

from headwater_dev.bench.connectors.sources import mqtt_publishers
from headwater_dev.devstack.ports import free_port


async def test_a_publisher_that_cannot_connect_fails_at_once() -> None:
    started = time.monotonic()
    with pytest.raises(RuntimeError, match=r"a source process failed \(exit 1\) before connected"):
        async with mqtt_publishers(free_port(), 10, 2):  # nothing listens there
            pytest.fail("the publishers were ready without a broker")
    assert time.monotonic() - started < 60  # its exit, not READY_S (120 s)
