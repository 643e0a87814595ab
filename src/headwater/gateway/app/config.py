"""``gateway.yaml``: the edge gateway's one config file, read with a clear error per bad field.

Four sections: ``ingest`` (where to send: target, token, TLS), ``spool`` (path, limits and
the full-spool policy), ``health`` (an optional HTTP listener and a periodic log line) and
``connectors`` (a list; each entry's ``type`` picks its schema: ``mqtt``, ``opcua`` or
``modbus``, see docs/gateway.md). :func:`load` returns a frozen :class:`GatewayFile` or
raises :class:`ConfigError` listing every problem. Connector schemas need no protocol
library, so ``check-config`` works with only the ``gateway`` extra installed.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from headwater.gateway.config import MAX_FRAME_MESSAGES, GatewayConfig, TlsConfig
from headwater.gateway.connectors.base import FULL_POLICIES, FullPolicy
from headwater.gateway.connectors.modbus_config import ModbusConfig, parse_modbus
from headwater.gateway.connectors.mqtt_config import MqttConfig, parse_mqtt
from headwater.gateway.connectors.opcua_config import OpcUaConfig, parse_opcua
from headwater.gateway.fields import ConfigError, Fields
from headwater.gateway.records import SpoolLimits

__all__ = ["ConfigError", "GatewayFile", "load", "parse"]

ConnectorConfig = MqttConfig | OpcUaConfig | ModbusConfig
#: Connector type -> its schema.
SCHEMAS: dict[str, Callable[[Fields, str], Any]] = {
    "mqtt": parse_mqtt,
    "opcua": parse_opcua,
    "modbus": parse_modbus,
}
_NAME = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
_LISTEN = re.compile(r"^[^\s:]+:\d{1,5}$")


@dataclass(frozen=True)
class SpoolSection:
    """The spool file, its limits, and what the gateway does when it is full."""

    path: Path
    limits: SpoolLimits
    when_full: FullPolicy
    #: "FULL": every enqueue flushed to disk; "NORMAL": survives crashes only, faster.
    synchronous: str


@dataclass(frozen=True)
class HealthSection:
    """Where the health report is served (``host:port``, GET /health) and how often logged."""

    listen: str | None
    log_every_s: float


@dataclass(frozen=True)
class GatewayFile:
    """The whole config file, checked."""

    ingest: GatewayConfig
    spool: SpoolSection
    health: HealthSection
    connectors: tuple[ConnectorConfig, ...]


def load(path: str | Path) -> GatewayFile:
    """Read and check ``path``; raise ConfigError with every problem found."""
    import yaml  # only when a file is read: `headwater --help` loads no YAML parser

    source = str(path)
    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise ConfigError(source, [f"cannot read the file: {exc.strerror}"]) from None
    except yaml.YAMLError as exc:
        raise ConfigError(source, [f"not valid YAML: {exc}".replace("\n", " ")]) from None
    return parse(data, source)


def parse(data: object, source: str = "gateway.yaml") -> GatewayFile:
    """Check a parsed YAML document; raise ConfigError with every problem found."""
    problems: list[str] = []
    top = Fields(data, "", problems)
    ingest = _ingest(top.section("ingest", required=True))
    spool = _spool(top.section("spool", required=True))
    health = _health(top.section("health"))
    connectors = []
    names: set[str] = set()
    for entry in top.sections("connectors", required=True):
        name = entry.text("name", pattern=_NAME)
        if name in names:
            entry.error("name", f"{name!r} is used by another connector")
        names.add(name)
        kind = entry.choice("type", tuple(SCHEMAS))
        if isinstance(kind, str):  # else its fields cannot be judged: the type is the error
            connectors.append(SCHEMAS[kind](entry, name if isinstance(name, str) else ""))
            entry.finish()
    top.finish()
    if problems:
        raise ConfigError(source, problems)
    assert ingest is not None
    return GatewayFile(ingest, spool, health, tuple(connectors))


def _ingest(f: Fields) -> GatewayConfig | None:
    target = f.text("target")
    token = f.secret_env("token_env")
    tls_fields = f.section("tls")
    tls = None
    if f.has("tls"):
        ca, cert, key = (tls_fields.file(n) for n in ("ca_file", "cert_file", "key_file"))
        server_name = tls_fields.text("server_name", None)
        if (cert is None) != (key is None):
            tls_fields.error("", "cert_file and key_file go together (mTLS)")
        else:
            tls = TlsConfig(
                root_certificates=ca.read_bytes() if ca else None,
                client_certificate_chain=cert.read_bytes() if cert else None,
                client_private_key=key.read_bytes() if key else None,
                server_name=server_name,
            )
        tls_fields.finish()
    frame_messages = f.integer("frame_messages", 100, 1, MAX_FRAME_MESSAGES)
    call_timeout_s = f.number("call_timeout_s", 10.0, 0.1)
    use_stream = f.flag("use_stream", True)
    f.finish()
    if not isinstance(target, str):
        return None
    return GatewayConfig(
        target=target,
        token=token,
        tls=tls,
        use_stream=use_stream,
        frame_messages=frame_messages,
        call_timeout_s=call_timeout_s,
    )


def _spool(f: Fields) -> SpoolSection:
    path = f.text("path")
    limits = SpoolLimits(
        max_bytes=f.integer("max_bytes", SpoolLimits.max_bytes, 4096),
        max_age_s=f.number("max_age_s", SpoolLimits.max_age_s, 0),
    )
    when_full = f.choice("when_full", FULL_POLICIES, "backpressure")
    synchronous = f.choice("synchronous", ("FULL", "NORMAL"), "FULL")
    f.finish()
    return SpoolSection(
        Path(path) if isinstance(path, str) else Path(), limits, when_full, synchronous
    )


def _health(f: Fields) -> HealthSection:
    listen = f.text("listen", None, pattern=_LISTEN)
    log_every_s = f.number("log_every_s", 60.0, 0)
    f.finish()
    return HealthSection(listen, log_every_s)
