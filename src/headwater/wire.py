"""Protobuf wire format by hand, both halves: encode what we hold as bytes, split what we receive.

Encode: the gateway sends spooled envelopes, and the benchmarks send prepared records, as
they are; wrapping them in a request by bytes avoids parsing and re-encoding every message.

Split: the ingest topic must hold each device message exactly as the gateway sent it, so
ingest's request deserializer keeps the original byte slices of the repeated ``messages``
field (a length-delimited field may be copied verbatim). Splitting never raises: a
malformed request becomes a RawFrame with ``error`` set, answered with INVALID_ARGUMENT by
the servicer instead of an opaque INTERNAL from gRPC.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from headwater.errors import HeadwaterError

_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5


class WireFormatError(HeadwaterError, ValueError):
    """The bytes are not a well-formed protobuf message (``field``: the one at fault)."""

    def __init__(self, message: str, field: str = "") -> None:
        super().__init__(message)
        self.field = field


#: The largest value of a uint64 field: a varint may carry up to 70 bits on the wire.
_UINT64_MAX = (1 << 64) - 1


@dataclass
class RawFrame:
    """A publish request (or stream frame) as raw message slices."""

    messages: list[bytes] = field(default_factory=list)
    frame_id: int = 0
    size: int = 0
    error: str = ""
    #: The field the error is about, when it is one field (e.g. ``frame_id``).
    error_field: str = ""


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise WireFormatError("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift >= 64:
            raise WireFormatError("varint longer than 10 bytes")


def split_frame(data: bytes, messages_field: int, frame_id_field: int = 0) -> RawFrame:
    """Return the raw slices of field ``messages_field`` (and the frame id, if any)."""
    frame = RawFrame(size=len(data))
    pos, end = 0, len(data)
    try:
        while pos < end:
            tag, pos = _varint(data, pos)
            number, wire_type = tag >> 3, tag & 7
            if number == 0:
                raise WireFormatError("field number 0")
            if wire_type == _VARINT:
                value, pos = _varint(data, pos)
                if number == frame_id_field:
                    # Refused here, before any message is written: an answer echoing it
                    # could not be built, so the frame would never be answered.
                    if value > _UINT64_MAX:
                        raise WireFormatError("frame_id is longer than 64 bits", "frame_id")
                    frame.frame_id = value
            elif wire_type == _LEN:
                length, pos = _varint(data, pos)
                if pos + length > end:
                    raise WireFormatError("length-delimited field runs past the end")
                if number == messages_field:
                    frame.messages.append(data[pos : pos + length])
                pos += length
            elif wire_type == _I64:
                pos += 8
            elif wire_type == _I32:
                pos += 4
            else:
                raise WireFormatError(f"unsupported wire type {wire_type}")
            if pos > end:
                raise WireFormatError("field runs past the end")
    except WireFormatError as exc:
        frame.error = f"malformed request: {exc}"
        frame.error_field = exc.field
        frame.messages.clear()
    return frame


def publish_deserializer(data: bytes) -> RawFrame:
    """Deserialize a Publish*Request: ``messages`` is field 1."""
    return split_frame(data, messages_field=1)


def stream_deserializer(data: bytes) -> RawFrame:
    """Deserialize a Stream*Request: ``frame_id`` is field 1, ``messages`` field 2."""
    return split_frame(data, messages_field=2, frame_id_field=1)


# Encoding
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
