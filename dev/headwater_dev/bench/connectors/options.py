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
