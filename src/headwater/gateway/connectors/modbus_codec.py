"""Modbus register maps: values in 16-bit registers, and the reads that fetch them.

A value spans 1 to 4 registers (or one bit for coils and discrete inputs). Devices
disagree on the order of bytes within a register and of registers within a value, so
both are configured: ``byte_order`` and ``word_order`` (big/big is the Modbus standard's;
little word order is the common "swapped" float). The value reported is ``raw * scale +
offset``; a write inverts that.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from headwater.gateway.connectors.modbus_config import Register

_FORMATS = {
    "int16": "h",
    "uint16": "H",
    "int32": "i",
    "uint32": "I",
    "float32": "f",
    "float64": "d",
}
#: Most registers (bits) one read may ask for (Modbus Application Protocol 1.1b3, 6.1-6.4).
MAX_REGISTERS = 125
MAX_BITS = 2000


def decode(register: Register, words: list[int] | list[bool]) -> float:
    """Return the scaled value of ``register`` from its registers (or its one bit)."""
    if register.data_type == "bool":
        raw: float = 1.0 if words[0] else 0.0
    else:
        ordered = list(words) if register.word_order == "big" else list(reversed(words))
        data = b"".join(int(w).to_bytes(2, register.byte_order) for w in ordered)  # type: ignore[arg-type]
        # The bytes are now most significant first: unpack big-endian.
        (raw,) = struct.unpack(">" + _FORMATS[register.data_type], data)
    return raw * register.scale + register.offset


def encode(register: Register, value: float) -> list[int] | bool:
    """Return the registers (or the bit) that hold ``value`` (scaled back) in the device.

    Raises:
        ValueError: the value does not fit the register's type.
    """
    raw = (value - register.offset) / register.scale
    if register.data_type == "bool":
        return bool(raw)
    fmt = _FORMATS[register.data_type]
    number: float = raw if fmt in "fd" else round(raw)
    try:
        data = struct.pack(">" + fmt, number)
    except struct.error as exc:
        raise ValueError(f"{value} does not fit {register.name} ({register.data_type})") from exc
    words = [int.from_bytes(data[i : i + 2], register.byte_order) for i in range(0, len(data), 2)]  # type: ignore[arg-type]
    return words if register.word_order == "big" else list(reversed(words))


@dataclass(frozen=True)
class Block:
    """One read request: a table's contiguous span and the values in it."""

    table: str
    start: int
    count: int
    registers: tuple[Register, ...]


def blocks(registers: tuple[Register, ...], max_gap: int = 8) -> list[Block]:
    """Group the map into as few reads as the protocol's limits allow.

    Values of one table whose addresses are at most ``max_gap`` apart share a read (the
    registers between them are read and ignored): 1,000 registers are a handful of
    requests per poll, not a thousand.
    """
    out: list[Block] = []
    for table in ("holding", "input", "coil", "discrete"):
        limit = MAX_BITS if table in ("coil", "discrete") else MAX_REGISTERS
        mine = sorted((r for r in registers if r.table == table), key=lambda r: r.address)
        group: list[Register] = []
        for r in mine:
            if group:
                start = group[0].address
                end = max(g.address + g.count for g in group)
                if r.address - end > max_gap or r.address + r.count - start > limit:
                    out.append(_block(table, group))
                    group = []
            group.append(r)
        if group:
            out.append(_block(table, group))
    return out


def _block(table: str, group: list[Register]) -> Block:
    start = group[0].address
    end = max(g.address + g.count for g in group)
    return Block(table, start, end - start, tuple(group))
