"""``headwater gateway run``: several connectors, one spool, one ingest connection.

The connectors write into the one spool through a :class:`Sink`; one
:class:`GatewayClient` sends it to ingest and takes commands, which the runner hands to
the connector that owns the device. Everything stops when ``stop`` is set (SIGINT or
SIGTERM): the connectors stop reading (what they have not spooled stays
unacknowledged at the source), and the client finishes the frames in flight.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import Coroutine, Sequence
from typing import Any

from headwater.gateway.app import health
from headwater.gateway.app.config import ConnectorConfig, GatewayFile
from headwater.gateway.client import GatewayClient
from headwater.gateway.commands import RejectCommand
from headwater.gateway.connectors.base import Connector, Sink
from headwater.gateway.spool import Spool
from headwater.proto.commands.v1.command_pb2 import Command
from headwater.runtime.startup import StartupError

log = logging.getLogger(__name__)

#: Connector type -> (module, class, the extra that installs its protocol library).
CONNECTORS = {
    "mqtt": ("headwater.gateway.connectors.mqtt", "MqttConnector", "gateway-mqtt"),
    "opcua": ("headwater.gateway.connectors.opcua", "OpcUaConnector", "gateway-opcua"),
    "modbus": ("headwater.gateway.connectors.modbus", "ModbusConnector", "gateway-modbus"),
}


def build_connector(config: ConnectorConfig, sink: Sink) -> Connector:
    """Return the connector for ``config``; StartupError when its extra is not installed."""
    module, cls, extra = CONNECTORS[config.type]
    try:
        connector: Connector = getattr(importlib.import_module(module), cls)(config, sink)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] == "headwater":
            raise
        raise StartupError(
            f"connector {config.name} ({config.type}) needs {exc.name}: "
            f"pip install 'headwater[{extra}]'"
        ) from None
    return connector


class CommandRouter:
    """Hands each command to the connector that owns its device."""

    def __init__(self) -> None:
        self.connectors: Sequence[Connector] = ()

    async def __call__(self, command: Command) -> bytes | None:
        """Run ``command`` on its device's connector; REJECTED when no connector owns it."""
        for connector in self.connectors:
            if connector.owns(command.device_id):
                return await connector.command(command)
        raise RejectCommand(
            "UNKNOWN_DEVICE", f"no connector of this gateway serves {command.device_id!r}"
        )


async def run(config: GatewayFile, stop: asyncio.Event) -> None:
    """Run the gateway until ``stop`` is set."""
    s = config.spool
    router = CommandRouter()
    with Spool(s.path, s.limits, synchronous=s.synchronous) as spool:  # type: ignore[arg-type]
        async with GatewayClient(spool, config.ingest, commands=router) as client:
            sink = Sink(client, s.when_full)
            connectors = [build_connector(c, sink) for c in config.connectors]
            router.connectors = connectors
            tasks = [client.run(stop), *(c.run(stop) for c in connectors)]
            if config.health.listen:
                tasks.append(health.serve(config.health.listen, connectors, spool, stop))
            if config.health.log_every_s:
                tasks.append(health.log_every(config.health.log_every_s, connectors, spool, stop))
            log.info(
                "gateway running",
                extra={
                    "connectors": [c.name for c in connectors],
                    "spool": str(s.path),
                    "target": config.ingest.target,
                },
            )
            results = await asyncio.gather(
                *(_stopping_on_error(t, stop) for t in tasks), return_exceptions=True
            )
            log.info("gateway stopped", extra={"spool_depth": spool.depth})
    for result in results:
        if isinstance(result, BaseException):
            raise result


async def _stopping_on_error(task: Coroutine[Any, Any, None], stop: asyncio.Event) -> None:
    """Run ``task``; if it fails, stop the whole gateway (a supervisor restarts it)."""
    try:
        await task
    except BaseException:
        stop.set()
        raise
