"""The ``opcua`` connector's schema: the server, its security, and the monitored items.

Needs no OPC UA library, so ``gateway check-config`` runs with the ``gateway`` extra alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from headwater.gateway.fields import DEVICE_ID, Fields

_NODE_ID = re.compile(r"^(ns=\d+;)?[isgb]=.+$")
_FIELD = re.compile(r"^[A-Za-z0-9_.:/ -]{1,128}$")
SECURITY_POLICIES = ("None", "Basic256Sha256")
SECURITY_MODES = ("Sign", "SignAndEncrypt")
DEADBANDS = ("none", "absolute", "percent")


@dataclass(frozen=True)
class MonitoredItem:
    """A node whose data changes are reported, and how the server samples it."""

    node_id: str
    #: The field name in the PubSub JSON payload (a measurement's name after enrichment).
    field: str
    sampling_interval_ms: float
    queue_size: int
    deadband: str
    deadband_value: float


@dataclass(frozen=True)
class MethodConfig:
    """A method that commands may call, by the command's name."""

    command: str
    object_id: str
    method_id: str


@dataclass(frozen=True)
class SecurityConfig:
    """Security policy and mode, with the client's certificate and key (PEM or DER)."""

    policy: str
    mode: str
    certificate: Path | None
    private_key: Path | None
    server_certificate: Path | None


@dataclass(frozen=True)
class OpcUaConfig:
    """One OPC UA server and the items read from it, all for one device id."""

    name: str
    url: str
    device_id: str
    publisher_id: str
    username: str | None
    password: str | None
    security: SecurityConfig
    publishing_interval_ms: float
    #: Seconds of silence (no data change, no keep-alive) before the session is renewed.
    timeout_s: float
    items: tuple[MonitoredItem, ...]
    #: Nodes a ``write`` command may write (nothing else is writable from the cloud).
    writable: tuple[str, ...]
    methods: tuple[MethodConfig, ...]
    type: str = "opcua"


def parse_opcua(f: Fields, name: str) -> OpcUaConfig:
    """Read an ``opcua`` connector entry (``name`` and ``type`` are read already)."""
    url = f.text("url", pattern=re.compile(r"^opc\.tcp://[^\s]+$"))
    device_id = f.text("device_id", pattern=DEVICE_ID)
    publisher_id = f.text("publisher_id", name)
    username = f.text("username", None)
    password = f.secret_env("password_env")
    security = _security(f.section("security"))
    interval = f.number("publishing_interval_ms", 500.0, 10, 3_600_000)
    timeout_s = f.number("timeout_s", 10.0, 1, 600)
    items = tuple(_item(i) for i in f.sections("items", required=True))
    fields = [i.field for i in items]
    for dup in sorted({x for x in fields if fields.count(x) > 1}):
        f.error("items", f"field {dup!r} is used twice")
    writable = tuple(f.strings("writable"))
    for node in writable:
        if not _NODE_ID.match(node):
            f.error("writable", f"{node!r} is not a node id (ns=2;s=Name, i=85...)")
    methods = tuple(_method(m) for m in f.sections("methods"))
    return OpcUaConfig(
        name,
        url,
        device_id,
        publisher_id,
        username,
        password,
        security,
        interval,
        timeout_s,
        items,
        writable,
        methods,
    )


def _security(f: Fields) -> SecurityConfig:
    policy = f.choice("policy", SECURITY_POLICIES, "None")
    mode = f.choice("mode", SECURITY_MODES, "SignAndEncrypt")
    cert, key = f.file("certificate_file"), f.file("private_key_file")
    server = f.file("server_certificate_file")
    if policy != "None" and (cert is None or key is None):
        f.error("policy", f"{policy} needs certificate_file and private_key_file")
    f.finish()
    return SecurityConfig(policy, mode, cert, key, server)


def _item(f: Fields) -> MonitoredItem:
    node_id = f.text("node_id", pattern=_NODE_ID)
    default_field = node_id.rsplit("=", 1)[-1] if isinstance(node_id, str) else ""
    item = MonitoredItem(
        node_id=node_id,
        field=f.text("field", default_field, pattern=_FIELD),
        sampling_interval_ms=f.number("sampling_interval_ms", 0.0, 0, 3_600_000),
        queue_size=f.integer("queue_size", 10, 1, 10_000),
        deadband=f.choice("deadband", DEADBANDS, "none"),
        deadband_value=f.number("deadband_value", 0.0, 0),
    )
    f.finish()
    return item


def _method(f: Fields) -> MethodConfig:
    method = MethodConfig(
        command=f.text("command", pattern=re.compile(r"^[A-Za-z0-9._:/-]{1,128}$")),
        object_id=f.text("object_id", pattern=_NODE_ID),
        method_id=f.text("method_id", pattern=_NODE_ID),
    )
    f.finish()
    return method
