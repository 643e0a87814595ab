"""The ``modbus`` connector's schema: the device and its register map.

Needs no Modbus library, so ``gateway check-config`` runs with the ``gateway`` extra alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from headwater.gateway.fields import DEVICE_ID, Fields

TABLES = ("holding", "input", "coil", "discrete")
#: Data type -> registers it spans (coils and discrete inputs are one bit: "bool").
DATA_TYPES = {
    "bool": 1,
    "int16": 1,
    "uint16": 1,
    "int32": 2,
    "uint32": 2,
    "float32": 2,
    "float64": 4,
}
ORDERS = ("big", "little")
_NAME = re.compile(r"^[A-Za-z0-9_.:/ -]{1,128}$")


@dataclass(frozen=True)
class Register:
    """One value of the map: where it is, how it is encoded, and what it means."""

    name: str
    table: str
    address: int
    data_type: str
    #: Byte order within a 16-bit register, and word order across registers.
    byte_order: str
    word_order: str
    #: The value reported is ``raw * scale + offset``, in ``unit``.
    scale: float
    offset: float
    unit: str
    #: Commands may write it (holding registers and coils only).
    writable: bool

    @property
    def count(self) -> int:
        """Registers (or bits) this value spans."""
        return DATA_TYPES[self.data_type]


@dataclass(frozen=True)
class ModbusConfig:
    """One Modbus TCP device (unit id), polled as one Headwater device."""

    name: str
    host: str
    port: int
    unit_id: int
    device_id: str
    poll_interval_s: float
    #: Report only the values that changed since the last report (a full report still
    #: goes out every ``full_report_every_s``, so a quiet value is seen alive).
    report_by_exception: bool
    full_report_every_s: float
    timeout_s: float
    registers: tuple[Register, ...]
    type: str = "modbus"


def parse_modbus(f: Fields, name: str) -> ModbusConfig:
    """Read a ``modbus`` connector entry (``name`` and ``type`` are read already)."""
    config = ModbusConfig(
        name=name,
        host=f.text("host"),
        port=f.integer("port", 502, 1, 65535),
        unit_id=f.integer("unit_id", 1, 0, 255),
        device_id=f.text("device_id", pattern=DEVICE_ID),
        poll_interval_s=f.number("poll_interval_s", 1.0, 0.01, 86400),
        report_by_exception=f.flag("report_by_exception", False),
        full_report_every_s=f.number("full_report_every_s", 300.0, 0),
        timeout_s=f.number("timeout_s", 3.0, 0.1, 60),
        registers=tuple(_register(r) for r in f.sections("registers", required=True)),
    )
    names = [r.name for r in config.registers]
    for dup in sorted({n for n in names if names.count(n) > 1}):
        f.error("registers", f"name {dup!r} is used twice")
    return config


def _register(f: Fields) -> Register:
    table = f.choice("table", TABLES)
    bits = table in ("coil", "discrete")
    data_type = f.choice("type", tuple(DATA_TYPES), "bool" if bits else "uint16")
    if isinstance(table, str) and isinstance(data_type, str) and bits != (data_type == "bool"):
        f.error("type", f"{table} values are bool; registers are not")
    writable = f.flag("writable", False)
    if writable and table in ("input", "discrete"):
        f.error("writable", f"{table} is read-only in Modbus")
    register = Register(
        name=f.text("name", pattern=_NAME),
        table=table,
        address=f.integer("address", low=0, high=65535),
        data_type=data_type,
        byte_order=f.choice("byte_order", ORDERS, "big"),
        word_order=f.choice("word_order", ORDERS, "big"),
        scale=f.number("scale", 1.0),
        offset=f.number("offset", 0.0),
        unit=f.text("unit", ""),
        writable=writable,
    )
    f.finish()
    return register
