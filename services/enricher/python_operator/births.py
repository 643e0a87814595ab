"""Sparkplug B birth certificates in the device's keyed state, and alias resolution.

A DBIRTH defines a device's metrics: name, alias, datatype and unit. Later messages may
send only the alias and the value. The pure part (:class:`Definitions`, :func:`resolve`)
turns pending readings into measurements; :class:`BirthCertificates` keeps a device's
definitions in one ``ValueState`` and touches it only for devices that send Sparkplug B
(every state call is a round trip to the JVM).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from headwater.enricher.executor import units
from headwater.enricher.executor.formats.base import (
    MetricDef,
    NormalizeError,
    Pending,
    check_time,
    check_value,
)
from headwater.enricher.executor.formats.sparkplug import NUMERIC, signed

#: The ValueState layout: the definitions as JSON (small: one entry per metric).
SCHEMA = "definitions string"


@dataclass
class Definitions:
    """A device's metric definitions from its birth certificate(s)."""

    #: alias -> metric name.
    names: dict[int, str] = field(default_factory=dict)
    #: metric name -> (unit as the device wrote it, datatype).
    metrics: dict[str, tuple[str, int]] = field(default_factory=dict)

    def apply(self, defs: Iterable[MetricDef], replace: bool) -> None:
        """Take the definitions of a message; a birth (``replace``) drops the earlier ones."""
        if replace:
            self.names.clear()
            self.metrics.clear()
        for d in defs:
            if d.alias is not None:
                self.names[d.alias] = d.name
            old_unit, old_type = self.metrics.get(d.name, ("", 0))
            self.metrics[d.name] = (d.unit or old_unit, d.datatype or old_type)

    def to_json(self) -> str:
        """Return the state value."""
        return json.dumps(
            {"names": {str(k): v for k, v in self.names.items()}, "metrics": self.metrics},
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str | None) -> Definitions:
        """Return the definitions kept in state (empty when there are none)."""
        if not text:
            return cls()
        doc = json.loads(text)
        return cls(
            {int(k): v for k, v in doc["names"].items()},
            {k: (u, t) for k, (u, t) in doc["metrics"].items()},
        )


def resolve(pending: Iterable[Pending], defs: Definitions) -> list[dict[str, Any]]:
    """Return the measurements of pending readings, named and typed by ``defs``.

    Raises:
        NormalizeError: ``PAYLOAD_INVALID`` for an alias no birth defined (or a value that is
            not finite), ``UNIT_UNKNOWN`` for a unit that cannot be converted.
    """
    out = []
    for p in pending:
        name = p.name or defs.names.get(p.alias if p.alias is not None else -1, "")
        if not name:
            raise NormalizeError(
                "PAYLOAD_INVALID",
                f"metric alias {p.alias} is not defined by a birth certificate of this device",
            )
        unit, datatype = defs.metrics.get(name, ("", 0))
        unit = p.unit or unit
        if not p.datatype and datatype:
            if datatype not in NUMERIC:
                continue  # e.g. a DateTime sent without its datatype: not a measurement
            value = float(signed(int(p.value), datatype)) if datatype in (1, 2, 3, 4) else p.value
        else:
            value = p.value
        canonical = ""
        if unit:
            try:
                value, canonical = units.convert(value, unit)
            except units.UnitError as exc:
                raise NormalizeError("UNIT_UNKNOWN", f"{name}: {exc}") from None
        out.append(
            {
                "name": name,
                "value": check_value(name, value),
                "unit": canonical,
                "time_ms": check_time(name, p.time_ms),
            }
        )
    return out


def _defs(rows: Iterable[Any] | None) -> list[MetricDef]:
    return [
        MetricDef(r["alias"], r["name"], r["unit"] or "", r["datatype"] or 0) for r in rows or []
    ]


def _pending(rows: Iterable[Any] | None) -> list[Pending]:
    return [
        Pending(
            r["alias"],
            r["name"] or "",
            r["value"],
            r["unit"] or "",
            r["time_ms"],
            r["datatype"] or 0,
        )
        for r in rows or []
    ]


def needs_births(msg: Mapping[str, Any]) -> bool:
    """Return True when a normalized row defines metrics or has readings to resolve."""
    return bool(msg.get("definitions") or msg.get("pending"))


def apply_to_row(msg: dict[str, Any], defs: Definitions) -> dict[str, Any]:
    """Take a row's definitions into ``defs``; return the row with its measurements resolved.

    The definitions of a birth are kept even when one of its readings is then rejected: they
    are what later messages of the device refer to.
    """
    defs.apply(_defs(msg.get("definitions")), bool(msg.get("replaces_definitions")))
    resolved = resolve(_pending(msg.get("pending")), defs)
    return msg | {"measurements": list(msg.get("measurements") or []) + resolved}


class BirthCertificates:
    """One device's definitions in a ``ValueState``, read at most once per batch or timer."""

    def __init__(self, handle: Any) -> None:
        self._state = handle.getValueState("births", SCHEMA)
        self._defs: Definitions | None = None
        self._changed = False
        self._calls = 0

    def apply(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Return ``msg`` with its readings resolved (see :func:`apply_to_row`)."""
        if not needs_births(msg):
            return msg
        if self._defs is None:
            kept = self._state.get()
            self._calls += 1
            self._defs = Definitions.from_json(kept[0] if kept else None)
        self._changed = self._changed or bool(msg.get("definitions"))
        return apply_to_row(msg, self._defs)

    def commit(self) -> int:
        """Write the definitions back if a message changed them; forget the cached copy.

        Returns:
            The state calls made since the last commit (for the profile).
        """
        if self._changed and self._defs is not None:
            self._state.update((self._defs.to_json(),))
            self._calls += 1
        calls, self._calls = self._calls, 0
        self._defs, self._changed = None, False
        return calls
