"""Check device messages against the rules written next to their fields in proto/.

The rules are read from the ``(headwater.options.v1.rules)`` field options of the
generated descriptors, so the contract and these checks cannot drift apart. Settings may
tighten the payload limit below the contract's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from headwater.proto.device.v1 import device_message_pb2
from headwater.proto.options.v1 import field_rules_pb2

_RULES_EXT = field_rules_pb2.rules


@dataclass(frozen=True)
class FieldCheck:
    """The compiled rules of one field."""

    name: str
    rules: field_rules_pb2.FieldRules
    pattern: re.Pattern[str] | None
    is_map: bool
    is_message: bool


def compile_checks(descriptor: Descriptor) -> list[FieldCheck]:
    """Return the checks of every field of ``descriptor`` that carries rules."""
    checks = []
    for fd in descriptor.fields:
        options = fd.GetOptions()
        if not options.HasExtension(_RULES_EXT):  # type: ignore[arg-type]
            continue
        rules: field_rules_pb2.FieldRules = options.Extensions[_RULES_EXT]  # type: ignore[index]
        is_map = fd.message_type is not None and fd.message_type.GetOptions().map_entry
        checks.append(
            FieldCheck(
                name=fd.name,
                rules=rules,
                pattern=re.compile(rules.pattern) if rules.pattern else None,
                is_map=bool(is_map),
                is_message=fd.type == FieldDescriptor.TYPE_MESSAGE and not is_map,
            )
        )
    return checks


def _length_violation(value: str | bytes, rules: field_rules_pb2.FieldRules) -> str | None:
    unit = "bytes" if isinstance(value, bytes) else "characters"
    if rules.max_len and len(value) > rules.max_len:
        return f"is {len(value)} {unit} long; at most {rules.max_len} allowed"
    if rules.min_len and len(value) < rules.min_len:
        return f"is {len(value)} {unit} long; at least {rules.min_len} required"
    return None


def _check_field(msg: Message, check: FieldCheck) -> list[tuple[str, str]]:
    rules, name = check.rules, check.name
    value = getattr(msg, name)
    if check.is_map:
        found = []
        if rules.max_entries and len(value) > rules.max_entries:
            found.append((name, f"has {len(value)} entries; at most {rules.max_entries} allowed"))
        for key, item in value.items():
            if not key or (rules.max_key_len and len(key) > rules.max_key_len):
                found.append((f"{name}[{key[:32]}]", f"key must be 1-{rules.max_key_len} chars"))
            if rules.max_value_len and len(item) > rules.max_value_len:
                found.append(
                    (f"{name}[{key[:32]}]", f"value longer than {rules.max_value_len} chars")
                )
        return found
    if check.is_message:
        if rules.required and not msg.HasField(name):
            return [(name, "is required")]
        return []
    if rules.required and not value:
        return [(name, "is required")]
    if not value:
        return []
    problem = _length_violation(value, rules)
    if problem:
        return [(name, problem)]
    if check.pattern and not check.pattern.fullmatch(value):
        return [(name, f"must match {rules.pattern}")]
    return []


class DeviceMessageValidator:
    """Validate DeviceMessages against the contract's rules and the configured limits."""

    def __init__(self, max_payload_bytes: int) -> None:
        self._checks = compile_checks(device_message_pb2.DeviceMessage.DESCRIPTOR)  # type: ignore[arg-type]
        self.max_payload_bytes = max_payload_bytes
        # The same rules as plain values, for :meth:`_plainly_valid` (read once here: a
        # field of the rules message is a protobuf lookup each time it is read).
        self._scalars = [
            (
                c.name,
                c.rules.required,
                c.rules.max_len,
                c.rules.min_len,
                c.pattern.fullmatch if c.pattern else None,
            )
            for c in self._checks
            if not c.is_map and not c.is_message
        ]
        self._required_messages = [
            c.name for c in self._checks if c.is_message and c.rules.required
        ]
        self._maps = [c.name for c in self._checks if c.is_map]

    def violations(self, msg: device_message_pb2.DeviceMessage) -> list[tuple[str, str]]:
        """Return (field, description) for every rule ``msg`` breaks; empty when valid."""
        if self._plainly_valid(msg):  # most messages: one pass, no lists, no descriptions
            return []
        return self._all_violations(msg)

    def _all_violations(self, msg: device_message_pb2.DeviceMessage) -> list[tuple[str, str]]:
        """Every rule ``msg`` breaks, each with its description (empty when valid)."""
        found: list[tuple[str, str]] = []
        for check in self._checks:
            found += _check_field(msg, check)
        too_large = len(msg.payload) > self.max_payload_bytes
        if too_large and not any(field == "payload" for field, _ in found):
            found.append(
                (
                    "payload",
                    f"is {len(msg.payload)} bytes; this server accepts at most "
                    f"{self.max_payload_bytes}",
                )
            )
        if msg.HasField("device_time"):
            found += _timestamp_violations("device_time", msg.device_time)
        if msg.sequence > MAX_SEQUENCE:
            found.append(("sequence", f"is {msg.sequence}; at most {MAX_SEQUENCE} allowed"))
        return found

    def _plainly_valid(self, msg: device_message_pb2.DeviceMessage) -> bool:
        """True only if ``msg`` breaks no rule that :meth:`violations` checks (issue 40).

        The common message's checks in one pass over the same compiled rules. False means
        "not shown valid here", never "invalid": a message with map entries, or anything
        this pass does not decide, goes through the full checks, which name every
        violation. ``tests/ingest/test_message_checks.py`` compares the two.
        """
        for name, required, max_len, min_len, fullmatch in self._scalars:
            value = getattr(msg, name)
            if not value:
                if required:
                    return False
                continue
            size = len(value)
            if (max_len and size > max_len) or (min_len and size < min_len):
                return False
            if fullmatch is not None and fullmatch(value) is None:
                return False
        for name in self._required_messages:
            if not msg.HasField(name):
                return False
        for name in self._maps:
            if getattr(msg, name):
                return False
        if len(msg.payload) > self.max_payload_bytes or msg.sequence > MAX_SEQUENCE:
            return False
        if msg.HasField("device_time"):
            ts = msg.device_time
            return 0 <= ts.seconds < _MAX_SECONDS and 0 <= ts.nanos <= 999_999_999
        return True


#: The largest sequence downstream can hold: the enricher's signed 64-bit column.
MAX_SEQUENCE = 2**63 - 1


#: 9999-12-31T23:59:59Z + 1s: the end of the range a protobuf Timestamp may hold.
_MAX_SECONDS = 253402300800


def _timestamp_violations(name: str, ts: Any) -> list[tuple[str, str]]:
    # The enricher converts the timestamp (ToMilliseconds), which raises outside these
    # ranges; checking here keeps such a message from ever reaching the topic.
    found = []
    if not 0 <= ts.seconds < _MAX_SECONDS:
        found.append((name, "must be between 1970-01-01 and 9999-12-31"))
    if not 0 <= ts.nanos <= 999_999_999:
        found.append((f"{name}.nanos", f"is {ts.nanos}; must be 0-999999999"))
    return found


def batch_size_limits() -> tuple[int, int]:
    """Return the (min, max) entries the contract allows in one publish request."""
    from headwater.proto.ingest.v1 import ingest_messages_pb2

    fd = ingest_messages_pb2.PublishTelemetryRequest.DESCRIPTOR.fields_by_name["messages"]
    rules: field_rules_pb2.FieldRules = fd.GetOptions().Extensions[_RULES_EXT]  # type: ignore[index]
    return rules.min_entries, rules.max_entries


def message_violations(msg: Message, checks: list[FieldCheck]) -> list[tuple[str, str]]:
    """Return (field, description) for every rule of ``checks`` that ``msg`` breaks.

    For contracts other than DeviceMessage (commands): the same rules, no server limits.
    """
    found: list[tuple[str, str]] = []
    for check in checks:
        found += _check_field(msg, check)
    return found
