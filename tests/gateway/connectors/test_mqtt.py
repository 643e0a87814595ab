"""The MQTT connector against a real Mosquitto, the real ingest service and Kafka.

Sparkplug B and JSON topics arrive untransformed with the right device ids and media types;
a QoS 1 message is acknowledged to the edge broker only once spooled (a gateway killed
before that gets it again); an edge broker restart loses nothing; a full spool holds QoS 1
data back at the broker, and drops the oldest (counted, logged) for QoS 0.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
import uuid
from pathlib import Path

import aiomqtt
import pytest

from headwater.gateway import Spool
from headwater_dev.devstack import vendors
from headwater_dev.devstack.ports import free_port
from tests.support.mosquitto import Mosquitto

from .support import (
    gateway_in_process,
    gateway_process,
    ingested,
    wait_until,
    write_config,
)

ACME = "application/vnd.acme.telemetry.v1+json"


def mqtt_connector(broker: Mosquitto, plant: str, **kw: object) -> dict[str, object]:
    return {
        "name": "edge-mqtt",
        "type": "mqtt",
        "broker": {"host": "127.0.0.1", "port": broker.port, "client_id": f"gw-{plant}"},
        "topics": [
            {"filter": f"{plant}/+/telemetry", "device_id": "acme-{0}-{1}", "content_type": ACME}
        ],
        **kw,
    }


async def publish(broker: Mosquitto, messages: list[tuple[str, bytes]], qos: int = 1) -> None:
    async with aiomqtt.Client("127.0.0.1", broker.port, identifier=uuid.uuid4().hex) as client:
        for topic, payload in messages:
            await client.publish(topic, payload, qos=qos)


async def subscribed(caplog: pytest.LogCaptureFixture) -> None:
    """Wait for the in-process gateway's subscriptions (earlier publishes would be lost)."""
    await wait_until(lambda: "subscribed on the edge broker" in caplog.text, 30, "subscribed")


def readings(plant: str, machine: str, n: int, start: int = 0) -> list[tuple[str, bytes]]:
    return [
        (f"{plant}/{machine}/telemetry", json.dumps({"temp_c": i, "pad": "x" * 150}).encode())
        for i in range(start, start + n)
    ]


async def test_sparkplug_and_json_reach_kafka_untransformed(
    mosquitto, start_ingest, ingest_settings, kafka_bootstrap, tmp_path: Path, caplog
) -> None:
    running = await start_ingest(ingest_settings)
    plant = f"p{uuid.uuid4().hex[:8]}"
    group = f"acme-{plant}"
    connector = mqtt_connector(mosquitto, plant, sparkplug={"groups": [group]})
    config = write_config(tmp_path / "gateway.yaml", running.target, [connector])
    r = vendors.Reading(21.5, 40.0, 101_325.0, 3.3)
    node = f"spBv1.0/{group}/%s/edge1"
    spb = [
        (node % "NBIRTH", vendors.sparkplug_node_birth(1, 1_700_000_000_000)),
        (node % "DBIRTH" + "/press", vendors.sparkplug_payload(r, birth=True)),
        (node % "DDATA" + "/press", vendors.sparkplug_payload(r, birth=False)),
        (node % "NDATA", b"\x08\x02"),
        (f"spBv1.0/STATE/{group}", b'{"online": true}'),  # host state: not device data
        (node % "NCMD", b"\x08\x03"),  # a command to the node: not device data
        (node % "DDEATH" + "/press", vendors.sparkplug_device_death(1_700_000_004_000, 4)),
        (node % "NDEATH", vendors.sparkplug_node_death(1)),  # the node's MQTT will
    ]
    plain = readings(plant, "m1", 5)
    async with gateway_in_process(config):
        await subscribed(caplog)
        await publish(mosquitto, spb + plain)
        found = await wait_until(
            lambda: (m := ingested(kafka_bootstrap, f"acme-{plant}")) and len(m) >= 11 and m,
            60, "the 11 device messages in ingest.telemetry.v1",
        )  # fmt: skip
    by_device: dict[str, list] = {}
    for m in found:
        by_device.setdefault(m.device_id, []).append(m)
    node_msgs = by_device[f"{group}:edge1"]
    device_msgs = by_device[f"{group}:edge1:press"]
    json_msgs = by_device[f"acme-{plant}-m1"]
    assert [m.content_type.split("=")[-1] for m in node_msgs] == ["NBIRTH", "NDATA", "NDEATH"]
    assert [m.payload for m in node_msgs] == [spb[0][1], b"\x08\x02", spb[7][1]]
    assert [m.content_type for m in device_msgs] == [
        f"{vendors.SPARKPLUG_B}; message-type={t}" for t in ("DBIRTH", "DDATA", "DDEATH")
    ]
    assert [m.payload for m in device_msgs] == [p for _, p in spb[1:3]] + [spb[6][1]]
    assert [m.payload for m in json_msgs] == [p for _, p in plain]
    assert {m.content_type for m in json_msgs} == {ACME}
    assert [m.sequence for m in json_msgs] == [1, 2, 3, 4, 5]
    assert json_msgs[0].attributes["mqtt-topic"] == f"{plant}/m1/telemetry"
    assert len(found) == 11


async def test_qos1_is_acknowledged_only_once_spooled_a_killed_gateway_gets_it_again(
    mosquitto, start_ingest, ingest_settings, kafka_bootstrap, tmp_path: Path
) -> None:
    """The spool fills (ingest unreachable): the gateway holds received messages
    unacknowledged; SIGKILL; restarted with room and ingest back, every message arrives,
    in publish order, including those that were received but never spooled."""
    plant = f"p{uuid.uuid4().hex[:8]}"
    dead_target = f"127.0.0.1:{free_port()}"
    connector = mqtt_connector(mosquitto, plant)
    config = write_config(tmp_path / "gateway.yaml", dead_target, [connector], max_bytes=4096)
    first = await gateway_process(config)
    log: list[str] = []

    async def collect() -> None:
        assert first.stderr is not None
        async for line in first.stderr:
            log.append(line.decode())

    reader = asyncio.create_task(collect())
    try:
        await wait_until(lambda: any("subscribed" in x for x in log), 30, "the gateway subscribed")
        sent = readings(plant, "m1", 40)
        await publish(mosquitto, sent)
        await wait_until(lambda: any("spool full: holding" in x for x in log), 30, "held back")
        with sqlite3.connect(f"file:{tmp_path / 'spool.db'}?mode=ro", uri=True) as db:
            (spooled,) = db.execute("SELECT COUNT(*) FROM outbox").fetchone()
        assert 0 < spooled < len(sent)
    finally:
        first.send_signal(signal.SIGKILL)
        await first.wait()
        reader.cancel()
    assert not any('"level": "error"' in x for x in log), log

    running = await start_ingest(ingest_settings)
    write_config(tmp_path / "gateway.yaml", running.target, [connector], max_bytes=1 << 20)
    async with gateway_in_process(config):
        found = await wait_until(
            lambda: (m := ingested(kafka_bootstrap, f"acme-{plant}"))
            and len({x.payload for x in m}) >= 40 and m,
            90, "all 40 in Kafka",
        )  # fmt: skip
    # None lost, in publish order. At least once: messages spooled in the instant before
    # the kill, their PUBACK not yet written, come again (repeats, never a gap).
    payloads = [m.payload for m in found]
    assert list(dict.fromkeys(payloads)) == [p for _, p in sent]
    assert len(payloads) - len(sent) <= spooled, "repeats of what was never spooled"
    assert [m.sequence for m in found] == list(range(1, len(found) + 1))


async def test_an_edge_broker_restart_loses_nothing(
    mosquitto, start_ingest, ingest_settings, kafka_bootstrap, tmp_path: Path, caplog
) -> None:
    running = await start_ingest(ingest_settings)
    plant = f"p{uuid.uuid4().hex[:8]}"
    config = write_config(
        tmp_path / "gateway.yaml", running.target, [mqtt_connector(mosquitto, plant)]
    )
    before, after = readings(plant, "m1", 20), readings(plant, "m1", 20, start=20)
    async with gateway_in_process(config):
        await subscribed(caplog)
        await publish(mosquitto, before)
        await wait_until(lambda: len(ingested(kafka_bootstrap, f"acme-{plant}")) >= 20, 60, "A")
        mosquitto.stop()
        mosquitto.start()  # same port, its persistence file keeps our session
        await publish(mosquitto, after)  # queued for the session while the gateway reconnects
        found = await wait_until(
            lambda: (m := ingested(kafka_bootstrap, f"acme-{plant}")) and len(m) >= 40 and m,
            90, "A and B in Kafka",
        )  # fmt: skip
    assert [m.payload for m in found] == [p for _, p in before + after]


@pytest.mark.parametrize(("qos", "policy"), [(0, "backpressure"), (1, "drop_oldest")])
async def test_a_full_spool_drops_the_oldest_with_a_count_and_a_log_line(
    mosquitto, tmp_path: Path, caplog: pytest.LogCaptureFixture, qos: int, policy: str
) -> None:
    """QoS 0 data cannot wait (the broker does not keep it for us), and ``drop_oldest``
    says not to: the oldest spooled messages make room, counted and logged."""
    plant = f"p{uuid.uuid4().hex[:8]}"
    connector = mqtt_connector(mosquitto, plant, qos=qos)
    config = write_config(tmp_path / "gateway.yaml", f"127.0.0.1:{free_port()}", [connector],
                          max_bytes=4096, when_full=policy)  # fmt: skip
    async with gateway_in_process(config):
        await subscribed(caplog)
        await publish(mosquitto, readings(plant, "m1", 40), qos=qos)
        await wait_until(lambda: "dropped the oldest" in caplog.text, 30, "the drop logged")
    with Spool(tmp_path / "spool.db") as spool:
        stats = spool.stats()
    assert stats.counters.get("dropped_oldest", 0) > 0
    assert stats.bytes <= 4096
