"""What one run of ``headwater bench gateway-connectors`` offers (kept light: the CLI reads it)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ConnectorsOptions:
    """What one run offers (the issue's load by default)."""

    mqtt_values: int = 100_000
    #: Publisher processes sharing them: together they offer more than one gateway core takes.
    mqtt_publishers: int = 4
    opcua_items: int = 1000
    opcua_values: int = 50_000
    #: Data changes offered per second: twice the issue's target, so a gateway that keeps
    #: up shows more than the target.
    opcua_rate: float = 10_000.0
    modbus_registers: int = 1000
    modbus_polls: int = 60
    modbus_interval_s: float = 1.0
    #: At most this long per phase once its load is offered.
    phase_timeout_s: float = 300.0
    #: The gateway's CPU (taskset -c); None: the highest this process may use.
    cpu: int | None = None


@dataclass(frozen=True)
class SoakOptions:
    """What one soak offers: every connector at once, steadily (``headwater bench gateway-soak``).

    The issue's soak by default: 30 minutes at its MQTT target rate.
    """

    seconds: float = 1800.0
    mqtt_rate: float = 10_000.0
    opcua_items: int = 100
    #: Data changes a second, in rounds over every item.
    opcua_rate: float = 200.0
    modbus_registers: int = 100
    modbus_interval_s: float = 1.0
    sample_every_s: float = 10.0
    #: RSS before this is the start-up's (imports, connections, first buffers), not judged.
    warmup_s: float = 60.0
    #: At most this long, once the load stops, until ingest acknowledged every value.
    drain_timeout_s: float = 120.0
    #: The gateway's CPU (taskset -c); None: the highest this process may use.
    cpu: int | None = None
