"""asyncua's own server as the OPC UA server of the tests: a press with changing values.

``ns=2;s=Temperature`` (Double, writable, in °C: its EngineeringUnits property, as
OPC 10000-8 defines it), ``ns=2;s=Count`` (Int32, no unit) and the method
``ns=2;s=Reset`` on ``ns=2;s=Press`` (Int64 in, its double out). A new
:class:`PressServer` on the same port is a restarted server that kept nothing.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from asyncua import Server, ua

NS = 2  # the first namespace a server registers
#: The Temperature's unit: UNECE's CEL (degree Celsius) as OPC 10000-8, 5.6.3 numbers it.
CELSIUS = ua.EUInformation(
    NamespaceUri="http://www.opcfoundation.org/UA/units/un/cefact",
    UnitId=4408652,
    DisplayName=ua.LocalizedText("°C"),
    Description=ua.LocalizedText("degree Celsius"),
)


class PressServer:
    """One server instance on ``port`` (start, then stop: a restart is a new instance)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.url = f"opc.tcp://127.0.0.1:{port}/"
        self.server = Server()
        self.temperature: Any = None
        self.count: Any = None

    async def start(self, temperature: float = 20.0) -> None:
        await self.server.init()
        self.server.set_endpoint(self.url)
        self.server.set_security_policy([ua.SecurityPolicyType.NoSecurity])
        ns = await self.server.register_namespace("urn:headwater:test:press")
        assert ns == NS
        press = await self.server.nodes.objects.add_object(ua.NodeId("Press", ns), "Press")
        self.temperature = await press.add_variable(
            ua.NodeId("Temperature", ns), "Temperature", temperature, ua.VariantType.Double
        )
        await self.temperature.set_writable()
        await self.temperature.add_property(
            ua.NodeId("Temperature.EngineeringUnits", ns),
            ua.QualifiedName("EngineeringUnits", 0),
            CELSIUS,
            datatype=ua.NodeId(ua.ObjectIds.EUInformation),
        )
        self.count = await press.add_variable(
            ua.NodeId("Count", ns), "Count", 0, ua.VariantType.Int32
        )

        async def reset(_parent: object, level: ua.Variant) -> list[ua.Variant]:
            return [ua.Variant(level.Value * 2, ua.VariantType.Int64)]

        await press.add_method(
            ua.NodeId("Reset", ns), "Reset", reset, [ua.VariantType.Int64], [ua.VariantType.Int64]
        )
        await self.server.start()

    async def set(self, node: Any, value: object, source_time: datetime, status: int = 0) -> None:
        """Write ``value`` with its status and source time, as a device driver would."""
        variant = ua.Variant(value, await node.read_data_type_as_variant_type())
        await node.write_value(
            ua.DataValue(variant, ua.StatusCode(status), SourceTimestamp=source_time)
        )

    async def stop(self) -> None:
        await self.server.stop()
