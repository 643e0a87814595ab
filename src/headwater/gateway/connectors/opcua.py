"""The OPC UA connector: a subscription's data changes into the spool, as PubSub JSON.

One session per connector and one subscription with the configured monitored items
(sampling interval, queue size, deadband). Each data change becomes a device message in
the OPC UA PubSub JSON form (:mod:`.opcua_json`) with its status code and source and
server timestamps, and the item's engineering unit: the value of its ``EngineeringUnits``
property (an EUInformation, OPC 10000-8, 5.6.3), read for all items once a session, when
it subscribes (a data change does not carry it). When the session is lost the connector
reconnects with backoff and creates the subscription again; the server sends each item's
current value, and the time without a session is spooled as a gap message (status
BadNoCommunication), logged and counted, so a reconnect is never silent. An OPC UA server
cannot be asked to wait, so a full spool drops the oldest messages (counted, logged).

Commands: ``write`` (``{"node_id": ..., "value": ...}``, only nodes listed in
``writable``; the value takes the node's data type) and each configured method by its
command name (the payload: a JSON list of arguments).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from datetime import UTC, datetime
from typing import Any

from asyncua import Client, ua
from asyncua.common.subscription import DataChangeNotif

from headwater.gateway.commands import RejectCommand
from headwater.gateway.connectors import opcua_json
from headwater.gateway.connectors.base import Backoff, Connector, Sink
from headwater.gateway.connectors.opcua_config import MonitoredItem, OpcUaConfig
from headwater.gateway.records import NewMessage
from headwater.proto.commands.v1.command_pb2 import Command

log = logging.getLogger(__name__)
_DEADBAND_TYPES = {"none": 0, "absolute": 1, "percent": 2}
#: Data changes spooled in one transaction at most.
_BATCH = 500


class OpcUaConnector(Connector):
    """Reads an OPC UA server's monitored items (see the module docstring)."""

    def __init__(self, config: OpcUaConfig, sink: Sink) -> None:
        super().__init__(config.name, sink)
        self.config = config
        self._client: Client | None = None
        self._changes: asyncio.Queue[NewMessage] = asyncio.Queue(10 * _BATCH)
        self._sequence = 0
        self._fields = {i + 1: item for i, item in enumerate(config.items)}
        #: Client handle -> the item's EngineeringUnits in JSON (None: it has none), per session.
        self._units: dict[int, dict[str, Any] | None] = {}

    # --- reading ---------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Keep a session and subscription until ``stop``; spool changes meanwhile."""
        pump = asyncio.create_task(self._pump(stop))
        backoff = Backoff()
        lost_at: datetime | None = None
        try:
            while not stop.is_set():
                try:
                    lost_at = await self._session(stop, lost_at, backoff)
                except (OSError, TimeoutError, ua.UaError) as exc:
                    self.health.error(f"OPC UA server: {exc!r}")
                    log.warning(
                        "OPC UA session failed", extra={"connector": self.name, "error": repr(exc)}
                    )
                    lost_at = lost_at or datetime.now(UTC)
                if await backoff.sleep(stop):
                    break
        finally:
            await pump

    async def _session(
        self, stop: asyncio.Event, lost_at: datetime | None, backoff: Backoff
    ) -> datetime | None:
        """One session: connect, subscribe, mark the gap, wait for stop or loss.

        Returns when the connection was lost (the time it was), or None on stop.
        """
        c = self.config
        client = Client(c.url, timeout=c.timeout_s, watchdog_intervall=max(1.0, c.timeout_s / 4))
        if c.username:
            client.set_user(c.username)
            client.set_password(c.password or "")
        if c.security.policy != "None":
            parts = [
                c.security.policy,
                c.security.mode,
                str(c.security.certificate),
                str(c.security.private_key),
            ]
            if c.security.server_certificate:
                parts.append(str(c.security.server_certificate))
            await client.set_security_string(",".join(parts))
        lost = asyncio.Event()

        async def on_lost(_exc: Exception) -> None:
            lost.set()

        client.connection_lost_callback = on_lost
        await client.connect()
        try:
            self._units = await self._read_units(client)
            subscription = await client.create_subscription(
                ua.CreateSubscriptionParameters(
                    RequestedPublishingInterval=c.publishing_interval_ms,
                    RequestedLifetimeCount=10_000,
                    RequestedMaxKeepAliveCount=10,
                    PublishingEnabled=True,
                ),
                self,
            )
            results = await subscription.create_monitored_items(
                [_request(handle, item) for handle, item in self._fields.items()]
            )
            for (_, item), result in zip(self._fields.items(), results, strict=True):
                if isinstance(result, ua.StatusCode):
                    self.health.error(f"{item.node_id}: {result.name}")
                    log.error(
                        "monitored item refused by the server",
                        extra={
                            "connector": self.name,
                            "node_id": item.node_id,
                            "status": result.name,
                        },
                    )
            self._client = client
            self.health.connected = True
            backoff.reset()
            if lost_at is not None:
                await self._mark_gap(lost_at, datetime.now(UTC))
            log.info(
                "subscribed on the OPC UA server",
                extra={"connector": self.name, "items": len(self._fields)},
            )
            waiter = asyncio.create_task(lost.wait())
            stopper = asyncio.create_task(stop.wait())
            await asyncio.wait([waiter, stopper], return_when=asyncio.FIRST_COMPLETED)
            for task in (waiter, stopper):
                task.cancel()
            if stop.is_set():
                return None
            self.health.error("OPC UA connection lost")
            log.warning("OPC UA connection lost; reconnecting", extra={"connector": self.name})
            return datetime.now(UTC)
        finally:
            self._client = None
            self.health.connected = False
            with contextlib.suppress(Exception):  # the server may be gone: best effort
                await asyncio.wait_for(client.disconnect(), c.timeout_s)

    async def _read_units(self, client: Client) -> dict[int, dict[str, Any] | None]:
        """Return each item's EngineeringUnits, in two requests for all items.

        The property's node ids (TranslateBrowsePathsToNodeIds), then their values. An item
        without the property (a count, a state), or whose property the server does not let
        us read, has no unit. A refused request fails the session, as a refused subscription
        does (both are sent for all items at once: a server's operation limits are not split
        into several requests yet).
        """
        handles = list(self._fields)
        units: dict[int, dict[str, Any] | None] = dict.fromkeys(handles)
        paths = []
        for handle in handles:
            path = ua.BrowsePath()
            path.StartingNode = ua.NodeId.from_string(self._fields[handle].node_id)
            path.RelativePath = ua.RelativePath.from_string(".0:EngineeringUnits")
            paths.append(path)
        found = await client.uaclient.translate_browsepaths_to_nodeids(paths)
        have = [(h, r.Targets[0].TargetId) for h, r in zip(handles, found, strict=True)
                if r.StatusCode.is_good() and r.Targets]  # fmt: skip
        if not have:  # a Read of no node is refused (BadNothingToDo)
            return units
        read = await client.uaclient.read_attributes(
            [ua.NodeId(t.Identifier, t.NamespaceIndex) for _, t in have], ua.AttributeIds.Value
        )
        for (handle, _), dv in zip(have, read, strict=True):
            value = dv.Value.Value if dv.Value is not None else None
            if isinstance(value, ua.EUInformation):
                units[handle] = opcua_json.eu_information(
                    value.NamespaceUri, value.UnitId, value.DisplayName.Text,
                    value.Description.Text,
                )  # fmt: skip
        return units

    async def _mark_gap(self, lost: datetime, back: datetime) -> None:
        self.health.gaps_total += 1
        log.warning(
            "data gap: values of the OPC UA server may be missing between lost and back",
            extra={"connector": self.name, "lost": lost.isoformat(), "back": back.isoformat()},
        )
        payload = opcua_json.gap(
            self.config.publisher_id,
            self._next_sequence(),
            [i.field for i in self.config.items],
            lost,
            back,
        )
        await self._changes.put(self._message(payload, {"gap-start": opcua_json.iso(lost) or ""}))

    async def datachange_notification(self, node: Any, val: Any, data: DataChangeNotif) -> None:
        """Called by asyncua for each data change: queue its device message."""
        handle = data.monitored_item.ClientHandle
        item = self._fields.get(handle)
        if item is None:
            return
        dv = data.monitored_item.Value
        variant = dv.Value
        type_id = variant.VariantType.value if variant is not None else 0
        payload = opcua_json.data_change(
            self.config.publisher_id,
            handle,
            self._next_sequence(),
            item.field,
            type_id,
            val,
            dv.StatusCode.value if dv.StatusCode else 0,
            dv.SourceTimestamp,
            dv.ServerTimestamp,
            self._units.get(handle),
        )
        await self._changes.put(self._message(payload, None))

    def status_change_notification(self, status: ua.StatusChangeNotification) -> None:
        """Called by asyncua when the subscription's status changes (it timed out, say)."""
        self.health.error(f"subscription status {status.Status}")
        log.warning(
            "OPC UA subscription status changed",
            extra={"connector": self.name, "status": str(status.Status)},
        )

    def _next_sequence(self) -> int:
        self._sequence = (self._sequence + 1) % 65536  # a UInt16 in the standard
        return self._sequence

    def _message(self, payload: bytes, attributes: dict[str, str] | None) -> NewMessage:
        return NewMessage(
            self.config.device_id,
            opcua_json.CONTENT_TYPE,
            payload,
            int(time.time() * 1000),
            attributes,
        )

    async def _pump(self, stop: asyncio.Event) -> None:
        """Spool queued changes in batches until stop (then what is queued, too)."""
        while True:
            getter = asyncio.create_task(self._changes.get())
            stopper = asyncio.create_task(stop.wait())
            await asyncio.wait([getter, stopper], return_when=asyncio.FIRST_COMPLETED)
            stopper.cancel()
            if not getter.done():
                getter.cancel()
                return
            batch = [getter.result()]
            while len(batch) < _BATCH and not self._changes.empty():
                batch.append(self._changes.get_nowait())
            self.health.values(await self.sink.put(self.name, "telemetry", batch, False, stop))

    # --- commands ----------------------------------------------------------------------

    def owns(self, device_id: str) -> bool:
        """Return True for this connector's device id."""
        return device_id == self.config.device_id

    async def command(self, command: Command) -> bytes | None:
        """Write a listed node, or call a configured method."""
        client = self._client
        if client is None:
            raise ConnectionError(f"connector {self.name} has no session with the server")
        try:
            args = json.loads(command.payload or b"null")
        except ValueError as exc:
            raise RejectCommand("BAD_PAYLOAD", f"not JSON: {exc}") from None
        if command.name == "write":
            if not isinstance(args, dict) or args.get("node_id") not in self.config.writable:
                raise RejectCommand(
                    "NOT_WRITABLE",
                    f'write needs {{"node_id": one of {list(self.config.writable)}, "value": ...}}',
                )
            node = client.get_node(args["node_id"])
            vtype = await node.read_data_type_as_variant_type()
            await node.write_value(ua.DataValue(ua.Variant(args.get("value"), vtype)))
            return json.dumps({"written": args["node_id"]}).encode()
        method = next((m for m in self.config.methods if m.command == command.name), None)
        if method is None:
            raise RejectCommand("UNKNOWN_COMMAND", f"{self.name} has no command {command.name!r}")
        call_args = args if isinstance(args, list) else [] if args is None else [args]
        result = await client.get_node(method.object_id).call_method(
            ua.NodeId.from_string(method.method_id), *call_args
        )
        return json.dumps({"result": opcua_json.body(0, result)}).encode()


def _request(handle: int, item: MonitoredItem) -> ua.MonitoredItemCreateRequest:
    """Return the create request of one item (client handle = its place in the config)."""
    params = ua.MonitoringParameters(
        ClientHandle=handle,
        SamplingInterval=item.sampling_interval_ms,
        QueueSize=item.queue_size,
        DiscardOldest=True,
    )
    if item.deadband != "none":
        params.Filter = ua.DataChangeFilter(
            Trigger=ua.DataChangeTrigger.StatusValue,
            DeadbandType=_DEADBAND_TYPES[item.deadband],
            DeadbandValue=item.deadband_value,
        )
    return ua.MonitoredItemCreateRequest(
        ItemToMonitor=ua.ReadValueId(
            NodeId=ua.NodeId.from_string(item.node_id), AttributeId=ua.AttributeIds.Value
        ),
        MonitoringMode=ua.MonitoringMode.Reporting,
        RequestedParameters=params,
    )
