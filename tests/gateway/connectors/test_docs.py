"""The gateway.yaml examples in docs/gateway.md are checked and run as written, against
Mosquitto, asyncua's server, pymodbus's server and the real ingest service (only their
addresses and the spool's path are replaced)."""

from __future__ import annotations

import json
import random
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from headwater.gateway.app.config import load
from headwater.proto.sparkplug.v1 import sparkplug_b_pb2 as spb
from headwater_dev.devstack.ports import free_port
from headwater_dev.edge.modbus_device import ModbusDevice
from headwater_dev.edge.opcua_server import PressServer
from tests.support.ingest import TOKENS

from .support import gateway_in_process, ingested, wait_until
from .test_modbus import words
from .test_mqtt import publish, subscribed

DOC = Path(__file__).parents[3] / "docs" / "gateway.md"


def example(kind: str) -> str:
    """The yaml block of the docs whose first line names ``kind``."""
    blocks = re.findall(r"```yaml\n(# gateway\.yaml: .*?)```", DOC.read_text(), re.S)
    assert len(blocks) == 3
    (block,) = [b for b in blocks if kind in b.splitlines()[0]]
    return block


def config_file(tmp_path: Path, text: str, target: str, **addresses: str) -> Path:
    text = text.replace("127.0.0.1:50051", target)
    text = text.replace("/var/lib/headwater-gateway/spool.db", str(tmp_path / "spool.db"))
    for old, new in addresses.items():
        assert old in text, old
        text = text.replace(old, new)
    path = tmp_path / "gateway.yaml"
    path.write_text(text)
    load(path)  # what check-config does: no problem in the example
    return path


@pytest.fixture(autouse=True)
def _token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HEADWATER_GATEWAY_TOKEN", TOKENS["gw-a"])


async def test_the_mqtt_example(
    mosquitto, start_ingest, ingest_settings, kafka_bootstrap, tmp_path: Path, caplog
) -> None:
    running = await start_ingest(ingest_settings)
    config = config_file(tmp_path, example("MQTT"), running.target,
                         **{"port: 1883": f"port: {mosquitto.port}"})  # fmt: skip
    marker = random.random()
    async with gateway_in_process(config):
        await subscribed(caplog)
        await publish(mosquitto, [
            ("plant/001/telemetry", json.dumps({"temp_c": marker}).encode()),
            ("spBv1.0/acme-line1/DDATA/edge1/press", spb.Payload(seq=1).SerializeToString()),
        ])  # fmt: skip
        await wait_until(
            # Other tests write acme-001 too, not always JSON: look for this one's reading.
            lambda: any(m.payload == json.dumps({"temp_c": marker}).encode()
                        for m in ingested(kafka_bootstrap, "acme-001")),
            60, "the JSON reading as acme-001",
        )  # fmt: skip
        await wait_until(lambda: ingested(kafka_bootstrap, "acme-line1:edge1:press"), 60,
                         "the DDATA as acme-line1:edge1:press")  # fmt: skip


async def test_the_opcua_example(
    start_ingest, ingest_settings, kafka_bootstrap, tmp_path: Path
) -> None:
    running = await start_ingest(ingest_settings)
    server = PressServer(free_port())
    marker = round(random.uniform(1000, 2000), 3)
    await server.start(temperature=marker)
    config = config_file(tmp_path, example("OPC UA"), running.target,
                         **{"opc.tcp://127.0.0.1:4840/": server.url})  # fmt: skip
    try:
        async with gateway_in_process(config):
            await wait_until(
                lambda: any(f'"Body": {marker}' in m.payload.decode()
                            for m in ingested(kafka_bootstrap, "acme-press-1")),
                60, "the temperature as acme-press-1",
            )  # fmt: skip
            await server.set(server.count, 7, datetime.now(UTC))
            await wait_until(
                lambda: any('"Strokes": {"Value": {"Type": 6, "Body": 7}' in m.payload.decode()
                            for m in ingested(kafka_bootstrap, "acme-press-1")),
                60, "the stroke count",
            )  # fmt: skip
    finally:
        await server.stop()


async def test_the_modbus_example(
    start_ingest, ingest_settings, kafka_bootstrap, tmp_path: Path
) -> None:
    running = await start_ingest(ingest_settings)
    device = ModbusDevice(free_port())
    marker = random.randint(1, 30000)
    device.set("holding", 0, words("h", marker))
    await device.start()
    config = config_file(tmp_path, example("Modbus"), running.target,
                         **{"port: 502": f"port: {device.port}"})  # fmt: skip

    def polled() -> bool:
        for m in ingested(kafka_bootstrap, "acme-meter-1"):
            for metric in spb.Payload.FromString(m.payload).metrics:
                if metric.name == "temperature" and metric.double_value == pytest.approx(
                    marker * 0.1
                ):
                    return True
        return False

    try:
        async with gateway_in_process(config):
            await wait_until(polled, 60, "the temperature as acme-meter-1")
    finally:
        await device.stop()
