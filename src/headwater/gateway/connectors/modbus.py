"""The Modbus TCP connector: a register map polled at a fixed rate into the spool.

Each poll reads the map in as few requests as the protocol allows
(:func:`.modbus_codec.blocks`), decodes every value (type, byte and word order, scale,
offset) and spools one device message: a Sparkplug B DDATA payload whose metrics carry
the register's name, its value, the poll time and the unit (``engUnit``), which the
enricher turns into measurements without any birth certificate. With
``report_by_exception`` only the values that changed are sent (and all of them every
``full_report_every_s``). Polls keep to a fixed schedule (no drift); a poll that starts
late counts in the health's jitter figures. A Modbus device cannot be asked to wait, so
a full spool drops the oldest messages (counted, logged).

Commands: ``write`` with ``{"register": name, "value": v}`` writes a holding register
(or registers) or a coil marked ``writable``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import deque
from typing import Any

from pymodbus.client import AsyncModbusTcpClient
from pymodbus.exceptions import ModbusException

from headwater.gateway.commands import RejectCommand
from headwater.gateway.connectors import modbus_codec
from headwater.gateway.connectors.base import Backoff, Connector, Sink, wait_for
from headwater.gateway.connectors.modbus_config import ModbusConfig, Register
from headwater.gateway.connectors.sparkplug import CONTENT_TYPE
from headwater.gateway.records import NewMessage
from headwater.proto.commands.v1.command_pb2 import Command
from headwater.proto.sparkplug.v1 import sparkplug_b_pb2 as spb

log = logging.getLogger(__name__)
DDATA = CONTENT_TYPE + "; message-type=DDATA"


class ModbusConnector(Connector):
    """Polls one Modbus TCP device (see the module docstring)."""

    def __init__(self, config: ModbusConfig, sink: Sink) -> None:
        super().__init__(config.name, sink)
        self.config = config
        self._blocks = modbus_codec.blocks(config.registers)
        self._by_name = {r.name: r for r in config.registers}
        self._client: AsyncModbusTcpClient | None = None
        self._reported: dict[str, float] = {}
        self._full_at = 0.0
        #: How late each recent poll started against its schedule (seconds).
        self.lateness_s: deque[float] = deque(maxlen=10_000)

    async def run(self, stop: asyncio.Event) -> None:
        """Poll until ``stop`` is set; reconnect with backoff when the device is lost."""
        c = self.config
        backoff = Backoff()
        while not stop.is_set():
            client = AsyncModbusTcpClient(c.host, port=c.port, timeout=c.timeout_s, retries=0)
            try:
                if not await client.connect():
                    raise ConnectionError(f"cannot connect to {c.host}:{c.port}")
                self._client = client
                self.health.connected = True
                backoff.reset()
                log.info(
                    "connected to the Modbus device",
                    extra={"connector": self.name, "reads_per_poll": len(self._blocks)},
                )
                await self._poll(client, stop)
            except (ConnectionError, ModbusException, OSError, TimeoutError) as exc:
                self.health.error(f"Modbus device: {exc}")
                log.warning("Modbus device lost", extra={"connector": self.name, "error": str(exc)})
            finally:
                self._client = None
                self.health.connected = False
                client.close()
            if await backoff.sleep(stop):
                break

    async def _poll(self, client: AsyncModbusTcpClient, stop: asyncio.Event) -> None:
        interval = self.config.poll_interval_s
        due = time.monotonic()
        while not stop.is_set():
            self.lateness_s.append(max(0.0, time.monotonic() - due))
            polled_ms = int(time.time() * 1000)
            values = await self._read(client)
            await self._report(values, polled_ms, stop)
            due += interval
            behind = time.monotonic() - due
            if behind > 0:  # a poll took longer than the interval: skip, do not bunch up
                due += (behind // interval + 1) * interval
            if await wait_for(stop, due - time.monotonic()):
                return

    async def _read(self, client: AsyncModbusTcpClient) -> dict[str, float]:
        """Read every block; a block the device refuses is logged and left out."""
        values: dict[str, float] = {}
        unit = self.config.unit_id
        for block in self._blocks:
            read = {
                "holding": client.read_holding_registers,
                "input": client.read_input_registers,
                "coil": client.read_coils,
                "discrete": client.read_discrete_inputs,
            }[block.table]
            answer = await read(block.start, count=block.count, device_id=unit)
            if answer.isError():
                self.health.error(f"{block.table} {block.start}+{block.count}: {answer}")
                continue
            bits = block.table in ("coil", "discrete")
            data: list[Any] = list(answer.bits if bits else answer.registers)
            for r in block.registers:
                offset = r.address - block.start
                values[r.name] = modbus_codec.decode(r, data[offset : offset + r.count])
        return values

    async def _report(self, values: dict[str, float], polled_ms: int, stop: asyncio.Event) -> None:
        c = self.config
        now = time.monotonic()
        if c.report_by_exception and now < self._full_at:
            values = {n: v for n, v in values.items() if self._reported.get(n) != v}
        else:
            self._full_at = now + c.full_report_every_s
        if not values:
            return
        self._reported.update(values)
        message = NewMessage(c.device_id, DDATA, ddata(self._by_name, values, polled_ms), polled_ms)
        if await self.sink.put(self.name, "telemetry", [message], False, stop):
            self.health.values(len(values))

    # --- commands ----------------------------------------------------------------------

    def owns(self, device_id: str) -> bool:
        """Return True for this connector's device id."""
        return device_id == self.config.device_id

    async def command(self, command: Command) -> bytes | None:
        """Write a writable holding register (or registers) or coil."""
        try:
            args = json.loads(command.payload or b"null")
        except ValueError as exc:
            raise RejectCommand("BAD_PAYLOAD", f"not JSON: {exc}") from None
        if command.name != "write":
            raise RejectCommand(
                "UNKNOWN_COMMAND", f"Modbus devices take write, not {command.name!r}"
            )
        register = self._by_name.get(str(args.get("register"))) if isinstance(args, dict) else None
        value = args.get("value") if isinstance(args, dict) else None
        if register is None or not register.writable:
            writable = [r.name for r in self.config.registers if r.writable]
            raise RejectCommand(
                "NOT_WRITABLE", f'write needs {{"register": one of {writable}, "value": ...}}'
            )
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise RejectCommand("BAD_PAYLOAD", f"value {value!r} is not a number")
        try:
            encoded = modbus_codec.encode(register, value)
        except ValueError as exc:
            raise RejectCommand("OUT_OF_RANGE", str(exc)) from None
        client = self._client
        if client is None:
            raise ConnectionError(f"connector {self.name} is not connected to the device")
        unit = self.config.unit_id
        if isinstance(encoded, bool):
            answer = await client.write_coil(register.address, encoded, device_id=unit)
        else:
            answer = await client.write_registers(register.address, encoded, device_id=unit)
        if answer.isError():
            raise RuntimeError(f"the device refused the write: {answer}")
        return json.dumps({"written": register.name, "raw": encoded}).encode()


def ddata(registers: dict[str, Register], values: dict[str, float], time_ms: int) -> bytes:
    """Return a Sparkplug B payload of named, typed metrics with their units."""
    payload = spb.Payload(timestamp=time_ms)
    for name, value in values.items():
        r = registers[name]
        m = payload.metrics.add(name=name, timestamp=time_ms)
        if r.data_type == "bool" and r.scale == 1 and r.offset == 0:
            m.datatype, m.boolean_value = spb.DATA_TYPE_BOOLEAN, bool(value)
        else:
            m.datatype, m.double_value = spb.DATA_TYPE_DOUBLE, value
        if r.unit:
            m.properties.keys.append("engUnit")
            m.properties.values.add(type=spb.DATA_TYPE_STRING, string_value=r.unit)
    return payload.SerializeToString()
