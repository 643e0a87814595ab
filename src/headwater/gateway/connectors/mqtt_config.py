"""The ``mqtt`` connector's schema: the edge broker, Sparkplug B groups, and JSON topics.

Needs no MQTT library, so ``gateway check-config`` runs with the ``gateway`` extra alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from headwater.endpoints import NAMES as ENDPOINT_NAMES
from headwater.gateway.fields import Fields

#: Topic levels a template may name: ``{0}`` is the first level of the topic.
LEVEL_KEYS = tuple(str(i) for i in range(32))
SPARKPLUG_KEYS = ("group", "node", "device")
_MEDIA_TYPE = re.compile(r"^[\x21-\x7e][\x20-\x7e]{0,127}$")
_DATA_ENDPOINTS = tuple(n for n in ENDPOINT_NAMES if n != "command-status")


@dataclass(frozen=True)
class BrokerConfig:
    """The edge broker and the session the gateway keeps on it."""

    host: str
    port: int
    #: Fixed, so the broker keeps the session (and the unacknowledged messages) across
    #: reconnects and restarts of the gateway.
    client_id: str
    username: str | None
    password: str | None
    ca_file: Path | None
    cert_file: Path | None
    key_file: Path | None
    tls: bool
    keepalive_s: int


@dataclass(frozen=True)
class SparkplugConfig:
    """Sparkplug B groups to read, and how node and device ids become Headwater device ids."""

    groups: tuple[str, ...]
    endpoint: str
    #: Template over ``{group}``, ``{node}`` for N* messages.
    node_device_id: str
    #: Template over ``{group}``, ``{node}``, ``{device}`` for D* messages.
    device_id: str


@dataclass(frozen=True)
class TopicConfig:
    """A topic filter whose messages go to ``endpoint`` as ``content_type``."""

    filter: str
    endpoint: str
    #: Template over the topic's levels: ``"acme-{1}"`` takes the second level.
    device_id: str
    content_type: str
    #: Where commands to these devices are published: a template over ``{device_id}`` and
    #: the levels of the device's last data topic; None: these devices take no commands.
    command_topic: str | None


@dataclass(frozen=True)
class MqttConfig:
    """One edge broker and what to read from it."""

    name: str
    broker: BrokerConfig
    #: 1: a message is acknowledged to the broker only once it is in the spool; 0: at most once.
    qos: int
    #: Messages spooled in one transaction at most (one disk flush).
    batch_messages: int
    sparkplug: SparkplugConfig | None
    topics: tuple[TopicConfig, ...]
    type: str = "mqtt"


def parse_mqtt(f: Fields, name: str) -> MqttConfig:
    """Read an ``mqtt`` connector entry (``name`` and ``type`` are read already)."""
    broker = _broker(f.section("broker", required=True))
    qos = f.integer("qos", 1, 0, 1)
    batch = f.integer("batch_messages", 200, 1, 5000)
    sparkplug = _sparkplug(f.section("sparkplug")) if f.has("sparkplug") else None
    topics = tuple(_topic(t) for t in f.sections("topics"))
    if sparkplug is None and not topics:
        f.error("", "needs a sparkplug section or at least one entry in topics")
    return MqttConfig(name, broker, qos, batch, sparkplug, topics)


def _broker(f: Fields) -> BrokerConfig:
    host = f.text("host")
    port = f.integer("port", 1883, 1, 65535)
    client_id = f.text("client_id", pattern=re.compile(r"^[A-Za-z0-9._-]{1,64}$"))
    username = f.text("username", None)
    password = f.secret_env("password_env")
    tls = f.flag("tls", False)
    ca, cert, key = (f.file(n) for n in ("ca_file", "cert_file", "key_file"))
    if (cert is None) != (key is None):
        f.error("cert_file", "cert_file and key_file go together")
    keepalive = f.integer("keepalive_s", 30, 5, 3600)
    f.finish()
    return BrokerConfig(
        host, port, client_id, username, password, ca, cert, key, tls or ca is not None, keepalive
    )


def _sparkplug(f: Fields) -> SparkplugConfig:
    groups = f.strings("groups", ["+"])
    for g in groups:
        if "/" in g or "#" in g or (g != "+" and "+" in g):
            f.error("groups", f"{g!r} is not a group id (or +)")
    config = SparkplugConfig(
        groups=tuple(groups),
        endpoint=f.choice("endpoint", _DATA_ENDPOINTS, "telemetry"),
        node_device_id=f.template("node_device_id", SPARKPLUG_KEYS[:2], "{group}:{node}"),
        device_id=f.template("device_id", SPARKPLUG_KEYS, "{group}:{node}:{device}"),
    )
    f.finish()
    return config


def _topic(f: Fields) -> TopicConfig:
    topic_filter = f.text("filter")
    if isinstance(topic_filter, str) and not _valid_filter(topic_filter):
        f.error("filter", f"{topic_filter!r} is not an MQTT topic filter")
    config = TopicConfig(
        filter=topic_filter,
        endpoint=f.choice("endpoint", _DATA_ENDPOINTS, "telemetry"),
        device_id=f.template("device_id", LEVEL_KEYS),
        content_type=f.text("content_type", pattern=_MEDIA_TYPE),
        command_topic=f.template("command_topic", (*LEVEL_KEYS, "device_id"), None),
    )
    f.finish()
    return config


def _valid_filter(topic_filter: str) -> bool:
    """MQTT 3.1.1, 4.7: ``+`` fills a whole level, ``#`` only as the whole last level."""
    levels = topic_filter.split("/")
    for i, level in enumerate(levels):
        if "#" in level and (level != "#" or i != len(levels) - 1):
            return False
        if "+" in level and level != "+":
            return False
    return bool(topic_filter)
