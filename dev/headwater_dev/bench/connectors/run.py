"""``headwater bench gateway-connectors``: each connector from the edge to acknowledged by ingest.

One run starts the embedded broker (or uses ``--bootstrap``) and the ingest server in its
own process (as the other benches do), then one phase per connector, each with its own
``headwater gateway run`` process pinned to one CPU (:mod:`pinned_gateway`) and its own
source on loopback (:mod:`headwater_dev.edge`): Mosquitto fed by publisher processes,
asyncua's server in a process of its own (:mod:`sources`), pymodbus's server. The loads
are in :mod:`loads`, the targets in :mod:`report`.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

from headwater_dev.bench import server_proc
from headwater_dev.bench.connectors import loads
from headwater_dev.bench.connectors.options import ConnectorsOptions
from headwater_dev.bench.connectors.pinned_gateway import PinnedGateway, last_cpu
from headwater_dev.bench.connectors.report import targets
from headwater_dev.bench.connectors.sources import opcua_server
from headwater_dev.bench.report import machine
from headwater_dev.devstack.ports import free_port
from headwater_dev.edge.modbus_device import ModbusDevice
from headwater_dev.edge.mosquitto import Mosquitto
from headwater_dev.edge.opcua_server import NS

#: Modbus function code 3 (read holding registers): a poll begins with the read at 0.
READ_HOLDING = 3


@contextlib.asynccontextmanager
async def _gateway(
    workdir: Path, target: str, connector: dict[str, Any], cpu: int
) -> AsyncIterator[PinnedGateway]:
    gateway = PinnedGateway(workdir, target, [connector], cpu)
    gateway.start()
    try:
        yield gateway
    finally:
        await asyncio.to_thread(gateway.stop)


async def _mqtt(workdir: Path, target: str, opts: ConnectorsOptions, cpu: int) -> dict[str, Any]:
    broker = Mosquitto(workdir / "mosquitto", free_port(), max_queued=0, max_inflight=1000)
    broker.start()
    try:
        connector = {
            "name": "mqtt",
            "type": "mqtt",
            "broker": {"host": "127.0.0.1", "port": broker.port, "client_id": "bench-gateway"},
            "topics": [
                {"filter": "bench/+", "device_id": "bench-{1}", "content_type": "application/json"}
            ],
        }
        async with _gateway(workdir / "gateway-mqtt", target, connector, cpu) as gateway:
            return await loads.mqtt(
                gateway, broker.port, opts.mqtt_values, opts.mqtt_publishers, opts.phase_timeout_s
            )
    finally:
        broker.stop()


async def _opcua(workdir: Path, target: str, opts: ConnectorsOptions, cpu: int) -> dict[str, Any]:
    async with opcua_server(free_port(), opts.opcua_items) as server:
        connector = {
            "name": "opcua",
            "type": "opcua",
            "url": server.url,
            "device_id": "bench-press",
            "publishing_interval_ms": 100,
            # Queues deep enough that no write between two publishes is discarded.
            "items": [
                {"node_id": f"ns={NS};s=V{i}", "queue_size": 100} for i in range(opts.opcua_items)
            ],
        }
        async with _gateway(workdir / "gateway-opcua", target, connector, cpu) as gateway:
            return await loads.opcua(
                gateway, server, opts.opcua_values, opts.opcua_rate, opts.phase_timeout_s
            )


async def _modbus(workdir: Path, target: str, opts: ConnectorsOptions, cpu: int) -> dict[str, Any]:
    poll_starts_ms: list[int] = []

    def seen(function_code: int, address: int) -> None:
        if function_code == READ_HOLDING and address == 0:
            poll_starts_ms.append(int(time.time() * 1000))

    device = ModbusDevice(free_port(), on_request=seen)
    await device.start()
    try:
        connector = {
            "name": "modbus",
            "type": "modbus",
            "host": "127.0.0.1",
            "port": device.port,
            "device_id": "bench-meter",
            "poll_interval_s": opts.modbus_interval_s,
            "registers": [
                {"name": f"r{i}", "table": "holding", "address": i, "type": "int16"}
                for i in range(opts.modbus_registers)
            ],
        }
        async with _gateway(workdir / "gateway-modbus", target, connector, cpu) as gateway:
            polls_s = opts.modbus_polls * opts.modbus_interval_s
            return await loads.modbus(
                gateway, poll_starts_ms, opts.modbus_registers, opts.modbus_polls,
                opts.modbus_interval_s, polls_s + opts.phase_timeout_s,
            )  # fmt: skip
    finally:
        await device.stop()


async def run_connectors_benchmark(
    opts: ConnectorsOptions, bootstrap: str | None
) -> dict[str, Any]:
    """Run the three phases once; return the report."""
    cpu = last_cpu() if opts.cpu is None else opts.cpu
    report: dict[str, Any] = {"machine_at_start": machine(), "options": asdict(opts)}
    report["options"]["cpu"] = cpu
    with server_proc.serving(bootstrap) as (target, broker), tempfile.TemporaryDirectory() as tmp:
        report["broker"] = broker
        workdir = Path(tmp)
        report["connectors"] = {
            "mqtt": await _mqtt(workdir, target, opts, cpu),
            "opcua": await _opcua(workdir, target, opts, cpu),
            "modbus": await _modbus(workdir, target, opts, cpu),
        }
    report["targets"] = targets(report["connectors"], opts)
    report["machine_at_end"] = machine()
    return report
