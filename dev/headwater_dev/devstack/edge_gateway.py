"""One device of each connector behind one ``headwater gateway run``: the dev stack's edge.

With ``devstack run --connectors``: Mosquitto (Debian's package; left out, with the reason
in the summary, when it is not installed), asyncua's server (a press) and pymodbus's
server (a meter) on loopback, their values changing every second, and one gateway
process, ``gw-edge``, reading all three into ingest with its own token. What the summary
shows per connector: the values the gateway spooled (its health), the messages of the
device in Kafka and their ENRICHED completions.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiomqtt
import yaml
from asyncua import ua

from headwater.proto.master.v1 import device_master_pb2
from headwater_dev.devstack import vendors
from headwater_dev.devstack.ports import free_port
from headwater_dev.devstack.processes import CLI, PartFailedError, start_process, stop_process
from headwater_dev.devstack.seeding import GatewayEntry
from headwater_dev.edge import mosquitto
from headwater_dev.edge.gateway_health import read_health
from headwater_dev.edge.modbus_device import ModbusDevice
from headwater_dev.edge.opcua_server import NS, PressServer

GATEWAY_ID = "gw-edge"
TENANT = "acme"
TOKEN_ENV = "HEADWATER_EDGE_GATEWAY_TOKEN"
#: Connector -> (its device, the media type its messages carry, as master data records it).
DEVICES = {
    "mqtt": ("acme-edge-mqtt", vendors.ACME_TELEMETRY),
    "opcua": ("acme-edge-press", vendors.OPCUA_PUBSUB),
    "modbus": ("acme-edge-meter", vendors.SPARKPLUG_B),
}
#: How long the gateway may take to start and connect to the three sources.
READY_S = 60.0
#: How long the gateway may take to send what it spooled once the sources are quiet.
DRAIN_S = 30.0


@dataclass
class EdgeFigures:
    """Per connector: values spooled by the gateway, or why the connector was left out."""

    spooled: dict[str, int]
    left_out: dict[str, str]


def gateway_entry(token: str) -> GatewayEntry:
    """The edge gateway's line of the tokens file."""
    return GatewayEntry(GATEWAY_ID, TENANT, token, ("acme-edge-*",))


def master_records() -> list[device_master_pb2.DeviceMaster]:
    """Master data of the three edge devices."""
    return [
        device_master_pb2.DeviceMaster(
            device_id=device_id, site="plant-edge", area_code="A0", vendor_format=media_type,
            model=f"sim-{connector}", tenant=TENANT,
        )
        for connector, (device_id, media_type) in DEVICES.items()
    ]  # fmt: skip


class EdgeGateway:
    """The three sources and the gateway process; ``start``, then ``stop`` (which drains)."""

    def __init__(self, workdir: Path, target: str, token: str, seed: int) -> None:
        self.workdir = workdir / "edge"
        self.target = target
        self.token = token
        self.rng = random.Random(seed)
        self.health_port = free_port()
        self.broker = (
            mosquitto.Mosquitto(self.workdir / "mosquitto", free_port())
            if mosquitto.installed()
            else None
        )
        #: Connectors without their source here, and why.
        self.left_out = {} if self.broker is not None else {"mqtt": mosquitto.MISSING}
        self.press = PressServer(free_port())
        self.meter = ModbusDevice(free_port())
        self._proc: subprocess.Popen[bytes] | None = None
        self._changing: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._sources_up = False

    def _connectors(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if self.broker is not None:
            out.append({
                "name": "mqtt", "type": "mqtt",
                "broker": {"host": "127.0.0.1", "port": self.broker.port, "client_id": GATEWAY_ID},
                "topics": [{"filter": "edge/+/telemetry", "device_id": "{1}",
                            "content_type": DEVICES["mqtt"][1]}],
            })  # fmt: skip
        out.append({
            "name": "opcua", "type": "opcua", "url": self.press.url,
            "device_id": DEVICES["opcua"][0], "publishing_interval_ms": 500,
            "items": [{"node_id": f"ns={NS};s=Temperature"}, {"node_id": f"ns={NS};s=Count"}],
        })  # fmt: skip
        out.append({
            "name": "modbus", "type": "modbus", "host": "127.0.0.1", "port": self.meter.port,
            "device_id": DEVICES["modbus"][0], "poll_interval_s": 1.0,
            "registers": [{"name": "temperature", "table": "holding", "address": 0,
                           "type": "int16", "scale": 0.1, "unit": "°C"}],
        })  # fmt: skip
        return out

    async def start(self) -> None:
        """Start the sources, then the gateway (logging to ``edge/gateway.log``)."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        # asyncua's server warns that a server without security has none: it is meant to.
        logging.getLogger("asyncua").setLevel(logging.ERROR)
        if self.broker is not None:
            await asyncio.to_thread(self.broker.start)
        self._sources_up = True
        await self.press.start()
        await self.meter.start()
        config = self.workdir / "gateway.yaml"
        config.write_text(yaml.safe_dump({
            "ingest": {"target": self.target, "token_env": TOKEN_ENV},
            "spool": {"path": str(self.workdir / "spool.db")},
            "health": {"listen": f"127.0.0.1:{self.health_port}", "log_every_s": 0},
            "connectors": self._connectors(),
        }))  # fmt: skip
        env = os.environ | {TOKEN_ENV: self.token}
        command = [*CLI, "gateway", "run", "--config", str(config)]
        log = self.workdir / "gateway.log"
        self._proc = start_process(command, env, log)
        # Values start changing once every connector is connected (an MQTT message
        # published before the gateway subscribed would reach nobody).
        report = await _wait(lambda: read_health(self.health_port), lambda r: r["ok"], READY_S)
        if not (report and report["ok"]):
            raise PartFailedError(
                "edge gateway", f"the edge gateway was not connected within {READY_S:g}s", log
            )
        self._changing = asyncio.create_task(self._change_every_second())

    async def _change_every_second(self) -> None:
        """Play the machines: a new temperature at each source every second."""
        mqtt_device = DEVICES["mqtt"][0]
        async with contextlib.AsyncExitStack() as stack:
            publisher = None
            if self.broker is not None:
                publisher = await stack.enter_async_context(
                    aiomqtt.Client("127.0.0.1", self.broker.port)
                )
            count = 0
            while not self._stop.is_set():
                reading = vendors.random_reading(self.rng)
                if publisher is not None:
                    payload = vendors.telemetry_payload(vendors.ACME_TELEMETRY, reading)
                    await publisher.publish(f"edge/{mqtt_device}/telemetry", payload, qos=1)
                await self.press.temperature.write_value(reading.temperature_c)
                count += 1
                await self.press.count.write_value(ua.Variant(count, ua.VariantType.Int32))
                self.meter.set("holding", 0, [round(reading.temperature_c * 10)])
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), 1.0)

    async def stop(self) -> EdgeFigures:
        """Stop the sources' changes, let the gateway send its spool (bounded), stop it all."""
        self._stop.set()
        if self._changing is not None:
            await self._changing
        report = await _wait(
            lambda: read_health(self.health_port), lambda r: r["spool"]["depth"] == 0, DRAIN_S
        )
        await self.close()
        connectors = (report or {}).get("connectors", {})
        spooled = {name: int(c["values_total"]) for name, c in connectors.items()}
        return EdgeFigures(spooled, self.left_out)

    async def close(self) -> None:
        """Stop whatever still runs, without draining (again: nothing)."""
        self._stop.set()
        if self._changing is not None and not self._changing.done():
            self._changing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._changing
        if self._proc is not None:
            await asyncio.to_thread(stop_process, self._proc, 30)
            self._proc = None
        if self._sources_up:
            self._sources_up = False
            await self.meter.stop()
            await self.press.stop()
        if self.broker is not None:
            await asyncio.to_thread(self.broker.stop)


async def _wait(
    health: Callable[[], dict[str, Any] | None],
    done: Callable[[dict[str, Any]], bool],
    within_s: float,
) -> dict[str, Any] | None:
    """The first health report for which ``done`` holds, else the last one after ``within_s``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while True:
        report = await asyncio.to_thread(health)
        if (report is not None and report.get("spool") and done(report)) or loop.time() > deadline:
            return report
        await asyncio.sleep(0.2)
