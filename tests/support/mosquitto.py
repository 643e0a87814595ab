"""The ``mosquitto`` fixture: a real Mosquitto per test (``headwater_dev.edge.mosquitto``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from headwater_dev.devstack.ports import free_port
from headwater_dev.edge.mosquitto import MISSING, Mosquitto, installed

__all__ = ["Mosquitto", "mosquitto"]


@pytest.fixture
def mosquitto(tmp_path: Path):
    if installed() is None:
        pytest.fail(MISSING)
    broker = Mosquitto(tmp_path / "mosquitto", free_port())
    broker.start()
    yield broker
    broker.stop()
