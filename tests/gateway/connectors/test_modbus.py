"""The Modbus TCP connector against pymodbus's server, the real ingest service and Kafka.

Every data type, byte and word order, scale, offset and unit of a register map is read
as the device holds it and arrives as a Sparkplug B DDATA with units; report by exception
sends only changes; writes come through the command lifecycle.
"""

from __future__ import annotations

import asyncio
import json
import struct
import uuid
from pathlib import Path
from typing import Any

import pytest

from headwater.gateway.app.config import parse
from headwater.gateway.connectors import modbus_codec
from headwater.gateway.connectors.modbus import DDATA
from headwater.proto.sparkplug.v1 import sparkplug_b_pb2 as spb
from headwater_dev.bench.connectors.poll_lateness import poll_lateness
from headwater_dev.devstack.ports import free_port
from headwater_dev.edge.modbus_device import ModbusDevice
from tests.commands.support import send, wait_for_states

from .support import (
    gateway_in_process,
    gateway_process,
    ingested,
    stop_process,
    wait_until,
    write_config,
)

REGISTERS: list[dict[str, Any]] = [
    {"name": "temperature", "table": "holding", "address": 0, "type": "int16", "scale": 0.1,
     "unit": "°C"},
    {"name": "pressure", "table": "input", "address": 10, "type": "float32",
     "word_order": "little", "unit": "hPa"},
    {"name": "energy", "table": "holding", "address": 20, "type": "uint32", "unit": "kWh"},
    {"name": "flow", "table": "input", "address": 30, "type": "float64", "byte_order": "little",
     "unit": "l/min"},
    {"name": "level", "table": "holding", "address": 40, "type": "int32", "scale": 0.5,
     "offset": -10, "word_order": "little", "byte_order": "little", "unit": "mm"},
    {"name": "counter", "table": "input", "address": 50, "type": "uint16"},
    {"name": "running", "table": "coil", "address": 3},
    {"name": "door_open", "table": "discrete", "address": 5},
    {"name": "setpoint", "table": "holding", "address": 60, "type": "int16", "scale": 0.1,
     "unit": "°C", "writable": True},
]  # fmt: skip


def words(fmt: str, value: float, byte_order: str = "big", word_order: str = "big") -> list[int]:
    """The registers a device holding ``value`` has (computed apart from the codec)."""
    data = struct.pack(">" + fmt, value if fmt in "fd" else int(value))
    ws = [int.from_bytes(data[i : i + 2], byte_order) for i in range(0, len(data), 2)]  # type: ignore[arg-type]
    return ws if word_order == "big" else ws[::-1]


def machine(device: ModbusDevice) -> None:
    """What the device holds: the values REGISTERS describe, each encoded its own way."""
    device.set("holding", 0, words("h", -123))  # -12.3 °C
    device.set("input", 10, words("f", 1013.25, word_order="little"))
    device.set("holding", 20, words("I", 4_000_000_000))
    device.set("input", 30, words("d", 12.5, byte_order="little"))
    device.set("holding", 40, words("i", 70_000, "little", "little"))  # 70000*0.5-10
    device.set("input", 50, words("H", 65535))
    device.set("coil", 3, [True])
    device.set("discrete", 5, [True])


EXPECTED = {"temperature": -12.3, "pressure": 1013.25, "energy": 4_000_000_000.0, "flow": 12.5,
            "level": 34_990.0, "counter": 65535.0, "running": True, "door_open": True,
            "setpoint": 0.0}  # fmt: skip


def metrics(bootstrap: str, device_id: str) -> list[dict[str, tuple[Any, str, int]]]:
    """Each DDATA of the device: {name: (value, unit, timestamp)}."""
    out = []
    for m in ingested(bootstrap, device_id):
        assert m.content_type == DDATA
        p = spb.Payload.FromString(m.payload)
        out.append({
            x.name: (x.boolean_value if x.datatype == spb.DATA_TYPE_BOOLEAN else x.double_value,
                     dict(zip(x.properties.keys, [v.string_value for v in x.properties.values],
                              strict=True)).get("engUnit", ""), x.timestamp)
            for x in p.metrics
        })  # fmt: skip
    return out


def modbus_connector(device: ModbusDevice, device_id: str, **kw: Any) -> dict[str, Any]:
    return {"name": "meter", "type": "modbus", "host": "127.0.0.1", "port": device.port,
            "device_id": device_id, "poll_interval_s": 0.2, "registers": REGISTERS,
            **kw}  # fmt: skip


@pytest.mark.parametrize(
    ("data_type", "byte_order", "word_order", "value"),
    [("int16", "big", "big", -2.0), ("uint16", "little", "big", 65535.0),
     ("int32", "big", "little", -70000.0), ("uint32", "little", "little", 4e9),
     ("float32", "big", "little", 1013.25), ("float64", "little", "big", -1234.5678)],
)  # fmt: skip
def test_the_codec_reads_and_writes_every_type_and_order(data_type, byte_order, word_order, value):
    fmt = {"int16": "h", "uint16": "H", "int32": "i", "uint32": "I", "float32": "f",
           "float64": "d"}[data_type]  # fmt: skip
    (register,) = parse({"ingest": {"target": "x:1"}, "spool": {"path": "s"}, "connectors": [
        {"name": "m", "type": "modbus", "host": "h", "device_id": "acme-1", "registers": [
            {"name": "v", "table": "holding", "address": 0, "type": data_type, "scale": 2,
             "offset": 1, "byte_order": byte_order, "word_order": word_order}]}]}
    ).connectors[0].registers  # fmt: skip
    held = words(fmt, value, byte_order, word_order)
    assert modbus_codec.decode(register, held) == value * 2 + 1
    assert modbus_codec.encode(register, value * 2 + 1) == held


def test_reads_are_grouped_within_the_protocol_limits() -> None:
    config = parse({"ingest": {"target": "x:1"}, "spool": {"path": "s"}, "connectors": [
        {"name": "m", "type": "modbus", "host": "h", "device_id": "acme-1", "registers": [
            {"name": f"r{i}", "table": "holding", "address": i * 2, "type": "float32"}
            for i in range(1000)]}]})  # fmt: skip
    blocks = modbus_codec.blocks(config.connectors[0].registers)
    assert len(blocks) == 17  # 2,000 registers in reads of at most 125
    assert all(b.count <= modbus_codec.MAX_REGISTERS for b in blocks)
    assert sum(len(b.registers) for b in blocks) == 1000


async def test_a_register_map_arrives_with_values_units_and_poll_times(
    start_ingest, ingest_settings, kafka_bootstrap, tmp_path: Path
) -> None:
    running = await start_ingest(ingest_settings)
    device = ModbusDevice(free_port())
    machine(device)
    await device.start()
    device_id = f"acme-meter-{uuid.uuid4().hex[:6]}"
    connector = modbus_connector(device, device_id, report_by_exception=True)
    config = write_config(tmp_path / "gateway.yaml", running.target, [connector])
    try:
        async with gateway_in_process(config):
            first = await wait_until(lambda: metrics(kafka_bootstrap, device_id), 30, "a poll")
            await asyncio.sleep(1)  # five more polls: nothing changed, nothing sent
            device.set("holding", 0, words("h", 215))
            await wait_until(lambda: len(metrics(kafka_bootstrap, device_id)) >= 2, 30, "a change")
    finally:
        await device.stop()
    full, *changes = metrics(kafka_bootstrap, device_id)
    assert first[0] == full
    assert {n: v for n, (v, _, _) in full.items()} == pytest.approx(EXPECTED)
    assert {n: u for n, (_, u, _) in full.items() if u} == {
        "temperature": "°C", "pressure": "hPa", "energy": "kWh", "flow": "l/min", "level": "mm",
        "setpoint": "°C"}  # fmt: skip
    assert len({t for _, _, t in full.values()}) == 1  # one poll, one time
    assert [{n: v for n, (v, _, _) in c.items()} for c in changes] == [{"temperature": 21.5}]


async def test_writes_come_through_the_command_lifecycle(
    command_topics, start_command_ingest, ingest_topics, tmp_path: Path
) -> None:
    ingest = await start_command_ingest()
    device = ModbusDevice(free_port())
    await device.start()
    config = write_config(tmp_path / "gateway.yaml", f"127.0.0.1:{ingest.port}",
                          [modbus_connector(device, "acme-004")])  # fmt: skip
    try:
        async with gateway_in_process(config):
            sent = [
                await asyncio.to_thread(send, command_topics, device="acme-004", name="write",
                                        payload=json.dumps(p).encode())
                for p in ({"register": "setpoint", "value": 21.5},
                          {"register": "temperature", "value": 1},  # not writable
                          {"register": "setpoint", "value": 99999})  # over int16
            ]  # fmt: skip
            ids = [c.command_id for c in sent]
            histories = await wait_for_states(command_topics, ids,
                                              {"EXECUTED", "FAILED", "REJECTED"})  # fmt: skip
            from pymodbus.client import AsyncModbusTcpClient

            client = AsyncModbusTcpClient("127.0.0.1", port=device.port)
            await client.connect()
            held = (await client.read_holding_registers(60, count=1, device_id=1)).registers
            client.close()
    finally:
        await device.stop()
    ok, refused, too_big = (histories[i] for i in ids)
    assert ok.states[-1] == "EXECUTED" and held == [215]
    assert json.loads(ok.current.result) == {"written": "setpoint", "raw": [215]}
    assert refused.current.reason.startswith("NOT_WRITABLE")
    assert too_big.current.reason.startswith("OUT_OF_RANGE")


@pytest.mark.figures
async def test_a_thousand_registers_polled_each_second_keep_their_schedule(
    start_ingest, ingest_settings, kafka_bootstrap, tmp_path: Path
) -> None:
    """The issue's Modbus load: 1,000 registers at 1 s, from ``headwater gateway run`` in its
    own process. Every poll arrives (none skipped as overdue), and the figure printed is
    how late each poll started against its schedule (docs/benchmarks.md)."""
    running = await start_ingest(ingest_settings)
    device = ModbusDevice(free_port())
    await device.start()
    device_id = f"acme-meter-{uuid.uuid4().hex[:6]}"
    registers = [{"name": f"r{i}", "table": "holding", "address": i, "type": "int16"}
                 for i in range(1000)]  # fmt: skip
    connector = modbus_connector(device, device_id, poll_interval_s=1.0, registers=registers)
    config = write_config(tmp_path / "gateway.yaml", running.target, [connector])
    gateway = await gateway_process(config)
    try:
        polls = await wait_until(
            lambda: (m := ingested(kafka_bootstrap, device_id)) and len(m) >= 60 and m,
            180, "60 polls",
        )  # fmt: skip
    finally:
        await stop_process(gateway)
        await device.stop()
    times = [m.device_time.ToMilliseconds() for m in polls[:60]]
    assert all(len(spb.Payload.FromString(m.payload).metrics) == 1000 for m in polls[:60])
    # The poll time is taken just before the reads, so this is how late each poll began.
    late = poll_lateness(times, 1000)
    assert not late.irregular_steps_ms, f"a poll was skipped or bunched up: {times}"
    print(f"1,000 registers at 1 s, 60 polls: lateness p50 {late.p50_ms} ms, p99 "
          f"{late.p99_ms} ms, max {late.max_ms} ms, min {late.min_ms} ms")  # fmt: skip
