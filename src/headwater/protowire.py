"""Protobuf wire encoding for the few places that build messages from bytes they hold.

The gateway sends spooled envelopes, and the benchmark sends prepared records, as they
are: wrapping them in a request by bytes avoids parsing and re-encoding every message.
"""

from __future__ import annotations


def varint(value: int) -> bytes:
    """Encode a non-negative integer as a protobuf varint."""
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def length_field(number: int, data: bytes) -> bytes:
    """Encode ``data`` as length-delimited field ``number``."""
    return varint(number << 3 | 2) + varint(len(data)) + data


def varint_field(number: int, value: int) -> bytes:
    """Encode ``value`` as varint field ``number``."""
    return varint(number << 3) + varint(value)
