"""The dev stack's edge gateway: its connectors, and MQTT left out (with why) without Mosquitto."""

from __future__ import annotations

from pathlib import Path

import pytest

from headwater_dev.devstack import edge_gateway
from headwater_dev.edge import mosquitto


async def test_without_mosquitto_the_mqtt_connector_is_left_out_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mosquitto, "installed", lambda: None)
    edge = edge_gateway.EdgeGateway(tmp_path, "127.0.0.1:1", "token", seed=7)
    assert edge.broker is None
    assert edge.left_out == {"mqtt": mosquitto.MISSING}
    assert [c["name"] for c in edge._connectors()] == ["opcua", "modbus"]


async def test_with_mosquitto_each_connector_reads_a_device_of_the_gateways_token(
    tmp_path: Path,
) -> None:
    if mosquitto.installed() is None:
        pytest.fail(mosquitto.MISSING)
    edge = edge_gateway.EdgeGateway(tmp_path, "127.0.0.1:1", "token", seed=7)
    assert edge.left_out == {}
    assert [c["name"] for c in edge._connectors()] == ["mqtt", "opcua", "modbus"]
    (pattern,) = edge_gateway.gateway_entry("token").devices
    assert all(
        device.startswith(pattern.rstrip("*")) for device, _ in edge_gateway.DEVICES.values()
    )
