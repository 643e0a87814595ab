"""Commands to MQTT devices through the command lifecycle: Sparkplug DCMD/NCMD and a
JSON command topic, published on the real edge broker; refusals reported as REJECTED."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import aiomqtt

from headwater.proto.sparkplug.v1 import sparkplug_b_pb2 as spb
from headwater_dev.devstack import vendors
from tests.commands.support import send, wait_for_states

from .support import gateway_in_process, ingested, wait_until, write_config
from .test_mqtt import ACME, publish, subscribed


async def test_commands_are_published_to_mqtt_devices_and_reported(
    mosquitto, command_topics, start_command_ingest, ingest_topics, tmp_path: Path, caplog
) -> None:
    ingest = await start_command_ingest()
    plant, group = f"p{uuid.uuid4().hex[:8]}", f"g{uuid.uuid4().hex[:8]}"
    connector = {
        "name": "edge-mqtt",
        "type": "mqtt",
        "broker": {"host": "127.0.0.1", "port": mosquitto.port, "client_id": f"gw-{plant}"},
        # Device ids the master data of the command tests knows: acme-001 .. acme-005.
        "sparkplug": {"groups": [group], "node_device_id": "acme-{node}",
                      "device_id": "acme-{device}"},
        "topics": [{"filter": f"{plant}/+/telemetry", "device_id": "acme-{1}",
                    "content_type": ACME, "command_topic": f"{plant}/{{1}}/commands"}],
    }  # fmt: skip
    config = write_config(tmp_path / "gateway.yaml", f"127.0.0.1:{ingest.port}", [connector])
    received: list[tuple[str, bytes]] = []

    async def listen(ready: asyncio.Event) -> None:
        async with aiomqtt.Client("127.0.0.1", mosquitto.port) as client:
            await client.subscribe(f"spBv1.0/{group}/+/#", qos=1)
            await client.subscribe(f"{plant}/+/commands", qos=1)
            ready.set()
            async for m in client.messages:
                if "CMD" in m.topic.value or m.topic.value.endswith("/commands"):
                    received.append((m.topic.value, bytes(m.payload)))  # type: ignore[arg-type]

    ready = asyncio.Event()
    listener = asyncio.create_task(listen(ready))
    r = vendors.Reading(21.5, 40.0, 101_325.0, 3.3)
    async with gateway_in_process(config):
        await ready.wait()
        await subscribed(caplog)
        await publish(mosquitto, [
            (f"spBv1.0/{group}/NBIRTH/003", b"\x08\x01"),
            (f"spBv1.0/{group}/DBIRTH/003/002", vendors.sparkplug_payload(r, birth=True)),
            (f"{plant}/001/telemetry", b'{"temp_c": 20}'),
        ])  # fmt: skip
        bootstrap = command_topics.kafka.bootstrap_servers
        await wait_until(
            lambda: {f"{plant}/001/telemetry", f"spBv1.0/{group}/DBIRTH/003/002"}
            <= {m.attributes.get("mqtt-topic") for m in ingested(bootstrap, "acme-00")},
            60, "the devices' data in Kafka (the gateway knows them)",
        )  # fmt: skip
        write = await asyncio.to_thread(
            send,
            command_topics,
            device="acme-002",
            name="write",
            payload=b'{"Process/Setpoint": 21.5, "Run": true}',
        )
        rebirth = await asyncio.to_thread(send, command_topics, device="acme-003", name="rebirth")
        plain = await asyncio.to_thread(
            send, command_topics, device="acme-001", name="setpoint", payload=b'{"celsius": 19}'
        )
        not_node = await asyncio.to_thread(send, command_topics, device="acme-002", name="rebirth")
        unknown = await asyncio.to_thread(send, command_topics, device="acme-004", name="write",
                                          payload=b"{}")  # fmt: skip
        ids = [c.command_id for c in (write, rebirth, plain, not_node, unknown)]
        histories = await wait_for_states(command_topics, ids, {"EXECUTED", "FAILED", "REJECTED"})
        await wait_until(lambda: len(received) >= 3, 30, "three commands on the edge broker")
    listener.cancel()
    states = {i: histories[i].states[-1] for i in ids}
    assert [states[i] for i in ids] == ["EXECUTED", "EXECUTED", "EXECUTED", "REJECTED", "REJECTED"]
    assert histories[not_node.command_id].current.reason.startswith("NOT_A_NODE: ")
    assert histories[unknown.command_id].current.reason.startswith("UNKNOWN_DEVICE: ")
    by_topic = dict(received)
    dcmd = spb.Payload.FromString(by_topic[f"spBv1.0/{group}/DCMD/003/002"])
    assert [(m.name, m.datatype) for m in dcmd.metrics] == [
        ("Process/Setpoint", spb.DATA_TYPE_DOUBLE), ("Run", spb.DATA_TYPE_BOOLEAN)]  # fmt: skip
    assert dcmd.metrics[0].double_value == 21.5 and dcmd.metrics[1].boolean_value
    ncmd = spb.Payload.FromString(by_topic[f"spBv1.0/{group}/NCMD/003"])
    assert [(m.name, m.boolean_value) for m in ncmd.metrics] == [("Node Control/Rebirth", True)]
    assert by_topic[f"{plant}/001/commands"] == b'{"celsius": 19}'
    assert json.loads(histories[plain.command_id].current.result) == {
        "topic": f"{plant}/001/commands"
    }
