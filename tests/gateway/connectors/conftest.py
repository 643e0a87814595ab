"""Connector tests: the edge broker fixture (a real Mosquitto per test)."""

from tests.support.mosquitto import mosquitto  # noqa: F401 (a fixture)
