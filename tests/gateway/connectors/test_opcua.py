"""The OPC UA connector against asyncua's own server, the real ingest service and Kafka.

Data changes arrive as OPC UA PubSub JSON with status and source/server timestamps; a
server restart is followed by a gap message and data again; writes and method calls
come through the command lifecycle.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from headwater.gateway.connectors.opcua_json import BAD_NO_COMMUNICATION, CONTENT_TYPE
from headwater_dev.devstack.ports import free_port
from headwater_dev.edge.opcua_server import NS, PressServer
from tests.commands.support import send, wait_for_states

from .support import gateway_in_process, ingested, wait_until, write_config

#: A Bad status a device driver reports (BadSensorFailure, OPC 10000-4, 7.34.2).
BAD_SENSOR_FAILURE = 0x808B0000


def opcua_connector(server: PressServer, device_id: str, **kw: Any) -> dict[str, Any]:
    return {
        "name": "press",
        "type": "opcua",
        "url": server.url,
        "device_id": device_id,
        "publisher_id": "press-1",
        "publishing_interval_ms": 50,
        "timeout_s": 4,
        "items": [
            {"node_id": f"ns={NS};s=Temperature", "sampling_interval_ms": 10, "queue_size": 100},
            {"node_id": f"ns={NS};s=Count", "field": "Strokes", "deadband": "absolute",
             "deadband_value": 5},
        ],
        **kw,
    }  # fmt: skip


def changes(bootstrap: str, device_id: str) -> list[dict[str, Any]]:
    """The data-set messages of the device, in order (one per device message).

    A message sent twice (at least once: a resend after a lost acknowledgement) has one
    message id; it is kept once, as the enricher keeps it.
    """
    out = []
    seen = set()
    for m in ingested(bootstrap, device_id):
        if m.message_id in seen:
            continue
        seen.add(m.message_id)
        assert m.content_type == CONTENT_TYPE
        doc = json.loads(m.payload)
        assert doc["MessageType"] == "ua-data" and doc["PublisherId"] == "press-1"
        out.append(doc["Messages"][0])
    return out


def values(msgs: list[dict[str, Any]], field: str) -> list[Any]:
    return [m["Payload"][field]["Value"]["Body"] for m in msgs if field in m["Payload"]
            and "Value" in m["Payload"][field]]  # fmt: skip


async def test_data_changes_arrive_as_pubsub_json_with_status_and_timestamps(
    start_ingest, ingest_settings, kafka_bootstrap, tmp_path: Path
) -> None:
    running = await start_ingest(ingest_settings)
    server = PressServer(free_port())
    await server.start(temperature=20.0)
    device = f"acme-press-{uuid.uuid4().hex[:6]}"
    config = write_config(tmp_path / "gateway.yaml", running.target,
                          [opcua_connector(server, device)])  # fmt: skip
    t0 = datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
    try:
        async with gateway_in_process(config):
            await wait_until(lambda: values(changes(kafka_bootstrap, device), "Temperature"),
                             30, "the initial value")  # fmt: skip
            await server.set(server.temperature, 21.5, t0)
            await server.set(server.temperature, -3.25, t0 + timedelta(seconds=1),
                             status=BAD_SENSOR_FAILURE)  # fmt: skip
            for strokes in (2, 9, 12, 20):  # deadband 5: 2 and 12 are too small a change
                await server.set(server.count, strokes, t0)
            await wait_until(lambda: 20 in values(changes(kafka_bootstrap, device), "Strokes"),
                             30, "the last stroke count")  # fmt: skip
    finally:
        await server.stop()
    msgs = changes(kafka_bootstrap, device)
    # The server passes no value with a Bad status (OPC 10000-4 allows it): null.
    assert values(msgs, "Temperature") == [20.0, 21.5, None]
    assert values(msgs, "Strokes") == [0, 9, 20]
    good, bad = [m["Payload"]["Temperature"] for m in msgs if "Temperature" in m["Payload"]][1:]
    assert good["Value"] == {"Type": 11, "Body": 21.5} and "Status" not in good
    # The item's EngineeringUnits, read from the server when the connector subscribed.
    assert good["EngineeringUnits"] == {
        "NamespaceUri": "http://www.opcfoundation.org/UA/units/un/cefact",
        "UnitId": 4408652,
        "DisplayName": {"Text": "°C"},
        "Description": {"Text": "degree Celsius"},
    }
    assert good["SourceTimestamp"] == "2026-01-02T03:04:05.678000Z"
    assert datetime.fromisoformat(good["ServerTimestamp"]) > datetime.now(UTC) - timedelta(
        minutes=5
    )
    assert bad["Status"] == BAD_SENSOR_FAILURE
    assert bad["SourceTimestamp"] == "2026-01-02T03:04:06.678000Z"
    strokes = [m for m in msgs if "Strokes" in m["Payload"]]
    assert strokes[-1]["Payload"]["Strokes"]["Value"]["Type"] == 6  # Int32
    assert "EngineeringUnits" not in strokes[-1]["Payload"]["Strokes"]  # Count has none


async def test_items_without_engineering_units_have_none(
    start_ingest, ingest_settings, kafka_bootstrap, tmp_path: Path
) -> None:
    running = await start_ingest(ingest_settings)
    server = PressServer(free_port())
    await server.start()
    device = f"acme-press-{uuid.uuid4().hex[:6]}"
    connector = opcua_connector(server, device)
    connector["items"] = [{"node_id": f"ns={NS};s=Count"}]  # no item with a unit at all
    config = write_config(tmp_path / "gateway.yaml", running.target, [connector])
    try:
        async with gateway_in_process(config):
            await server.set(server.count, 3, datetime.now(UTC))
            await wait_until(lambda: 3 in values(changes(kafka_bootstrap, device), "Count"),
                             30, "the count")  # fmt: skip
    finally:
        await server.stop()
    assert all("EngineeringUnits" not in m["Payload"]["Count"]
               for m in changes(kafka_bootstrap, device))  # fmt: skip


async def test_a_server_restart_is_marked_as_a_gap_then_data_flows_again(
    start_ingest, ingest_settings, kafka_bootstrap, tmp_path: Path
) -> None:
    running = await start_ingest(ingest_settings)
    port = free_port()
    server = PressServer(port)
    await server.start(temperature=20.0)
    device = f"acme-press-{uuid.uuid4().hex[:6]}"
    config = write_config(tmp_path / "gateway.yaml", running.target,
                          [opcua_connector(server, device)])  # fmt: skip
    async with gateway_in_process(config):
        await wait_until(lambda: values(changes(kafka_bootstrap, device), "Temperature"),
                         30, "the first value")  # fmt: skip
        await server.stop()
        lost = datetime.now(UTC)
        await asyncio.sleep(2)
        server = PressServer(port)  # a new process: it kept no subscription, no values
        await server.start(temperature=30.0)
        try:
            await wait_until(
                lambda: 30.0 in values(changes(kafka_bootstrap, device), "Temperature"),
                60,
                "data after the restart",
            )
            await server.set(server.temperature, 31.0, datetime.now(UTC))
            await wait_until(
                lambda: 31.0 in values(changes(kafka_bootstrap, device), "Temperature"),
                30,
                "live again",
            )
        finally:
            await server.stop()
    msgs = changes(kafka_bootstrap, device)
    gaps = [i for i, m in enumerate(msgs) if m.get("Status") == BAD_NO_COMMUNICATION]
    # Every new subscription starts with the current values, so a value may come again
    # only right after a gap (a session that was lost once more while the server came
    # back); apart from that, the readings in the order they were made.
    readings = []
    for i, m in enumerate(msgs):
        if "Value" in m["Payload"].get("Temperature", {}):
            value = m["Payload"]["Temperature"]["Value"]["Body"]
            if readings and readings[-1] == value:
                assert i - 1 in gaps, (i, msgs)
                continue
            readings.append(value)
    assert readings == [20.0, 30.0, 31.0]
    gap = msgs[gaps[0]]
    assert gaps[0] == 2  # after the first values, before the restarted server's
    assert set(gap["Payload"]) == {"Temperature", "Strokes"}
    assert all(v["Status"] == BAD_NO_COMMUNICATION for v in gap["Payload"].values())
    start, end = (datetime.fromisoformat(gap[k]) for k in ("GapStart", "GapEnd"))
    # The gap starts when the server went away and ends when data came back: the order is
    # the guarantee; the window around the loss is generous (a loaded machine notices late).
    assert lost - timedelta(seconds=30) <= start <= lost + timedelta(seconds=30)
    assert start < end


async def test_writes_and_method_calls_come_through_the_command_lifecycle(
    command_topics, start_command_ingest, ingest_topics, tmp_path: Path
) -> None:
    ingest = await start_command_ingest()
    server = PressServer(free_port())
    await server.start()
    connector = opcua_connector(
        server, "acme-005", writable=[f"ns={NS};s=Temperature"],
        methods=[{"command": "reset", "object_id": f"ns={NS};s=Press",
                  "method_id": f"ns={NS};s=Reset"}],
    )  # fmt: skip
    config = write_config(tmp_path / "gateway.yaml", f"127.0.0.1:{ingest.port}", [connector])
    try:
        async with gateway_in_process(config):
            sent = [
                await asyncio.to_thread(send, command_topics, device="acme-005", name=name,
                                        payload=payload)
                for name, payload in [
                    ("write", b'{"node_id": "ns=2;s=Temperature", "value": 25}'),
                    ("reset", b"[21]"),
                    ("write", b'{"node_id": "ns=2;s=Count", "value": 1}'),  # not writable
                    ("explode", b""),
                ]
            ]  # fmt: skip
            ids = [c.command_id for c in sent]
            histories = await wait_for_states(command_topics, ids,
                                              {"EXECUTED", "FAILED", "REJECTED"})  # fmt: skip
        assert await server.temperature.read_value() == 25.0
    finally:
        await server.stop()
    write, reset, refused, unknown = (histories[i] for i in ids)
    assert write.states[-1] == "EXECUTED" and reset.states[-1] == "EXECUTED"
    assert json.loads(reset.current.result) == {"result": 42}
    assert refused.states[-1] == "REJECTED" and refused.current.reason.startswith("NOT_WRITABLE")
    assert unknown.current.reason.startswith("UNKNOWN_COMMAND")
