"""asyncua's own server as an OPC UA server on loopback: a press with changing values.

``ns=2;s=Temperature`` (Double, writable, in °C: its EngineeringUnits property, as
OPC 10000-8 defines it), ``ns=2;s=Count`` (Int32, no unit) and the method
``ns=2;s=Reset`` on ``ns=2;s=Press`` (Int64 in, its double out). A new
:class:`PressServer` on the same port is a restarted server that kept nothing.
``start(variables=N)`` adds N more Doubles, ``ns=2;s=V0`` .. ``V<N-1>`` (a bench's
monitored items), in :attr:`PressServer.variables`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

from asyncua import Server, ua

NS = 2  # the first namespace a server registers
#: The Temperature's unit: UNECE's CEL (degree Celsius) as OPC 10000-8, 5.6.3 numbers it.
CELSIUS = ua.EUInformation(
    NamespaceUri="http://www.opcfoundation.org/UA/units/un/cefact",
    UnitId=4408652,
    DisplayName=ua.LocalizedText("°C"),
    Description=ua.LocalizedText("degree Celsius"),
)


def _node(name: str) -> ua.NodeId:
    """The node id ``ns=NS;s=<name>``."""
    return ua.NodeId.from_string(f"ns={NS};s={name}")


class PressServer:
    """One server instance on ``port`` (start, then stop: a restart is a new instance)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.url = f"opc.tcp://127.0.0.1:{port}/"
        self.server = Server()
        self.temperature: Any = None
        self.count: Any = None
        self.variables: list[Any] = []

    async def start(self, temperature: float = 20.0, variables: int = 0) -> None:
        """Build the address space (see the module docstring) and start serving."""
        await self.server.init()
        self.server.set_endpoint(self.url)
        self.server.set_security_policy([ua.SecurityPolicyType.NoSecurity])
        ns = await self.server.register_namespace("urn:headwater:test:press")
        if ns != NS:  # the node ids below, and their users, name namespace NS
            raise RuntimeError(f"namespace {ns}, not {NS}: the server has other namespaces")
        press = await self.server.nodes.objects.add_object(_node("Press"), "Press")
        self.temperature = await press.add_variable(
            _node("Temperature"), "Temperature", temperature, ua.VariantType.Double
        )
        await self.temperature.set_writable()
        await self.temperature.add_property(
            _node("Temperature.EngineeringUnits"),
            ua.QualifiedName("EngineeringUnits", 0),
            CELSIUS,
            datatype=ua.NodeId.from_string(f"i={ua.ObjectIds.EUInformation}"),
        )
        self.count = await press.add_variable(_node("Count"), "Count", 0, ua.VariantType.Int32)

        self.variables = [
            await press.add_variable(_node(f"V{i}"), f"V{i}", 0.0, ua.VariantType.Double)
            for i in range(variables)
        ]

        async def reset(_parent: object, level: ua.Variant) -> list[ua.Variant]:
            return [ua.Variant(level.Value * 2, ua.VariantType.Int64)]

        await press.add_method(
            _node("Reset"), "Reset", reset, [ua.VariantType.Int64], [ua.VariantType.Int64]
        )
        await self.server.start()

    async def set(self, node: Any, value: object, source_time: datetime, status: int = 0) -> None:
        """Write ``value`` with its status and source time, as a device driver would."""
        variant = ua.Variant(value, await node.read_data_type_as_variant_type())
        # asyncua types timestamps as its own DateTime; a datetime is what it takes.
        source = cast(ua.DateTime, source_time)
        status_code = ua.StatusCode(ua.UInt32(status))
        await node.write_value(ua.DataValue(variant, status_code, SourceTimestamp=source))

    async def stop(self) -> None:
        """Stop serving."""
        await self.server.stop()
