"""The MQTT connector: an edge broker's topics into the spool, acknowledged only once spooled.

The gateway keeps a persistent session on the edge broker (fixed client id, clean
session off) and acknowledges each QoS 1 message (PUBACK) only after the transaction
that spooled it committed. A gateway killed before that leaves the message
unacknowledged in its session, and the broker delivers it again when the gateway is
back. (Subscriptions ask for QoS 1 at most: with QoS 2 the client library confirms
receipt, PUBREC, before the application sees the message.) With the ``backpressure``
policy a full spool holds QoS 1 messages unacknowledged: the broker's in-flight window
then stops the flow, and its queue for our session keeps the rest (mosquitto's
``max_queued_messages``).

Sparkplug B messages are routed by :mod:`.sparkplug`; plain topics by their filter, the
device id taken from a template over the topic's levels. Commands are published to the
device: Sparkplug NCMD/DCMD, or a configured command topic; EXECUTED means the broker
acknowledged the publish.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl
import time
from collections.abc import Sequence
from dataclasses import dataclass

import aiomqtt

from headwater.gateway.commands import RejectCommand
from headwater.gateway.connectors import sparkplug
from headwater.gateway.connectors.base import Backoff, Connector, Sink
from headwater.gateway.connectors.mqtt_config import MqttConfig, TopicConfig
from headwater.gateway.fields import DEVICE_ID
from headwater.gateway.records import NewMessage
from headwater.proto.commands.v1.command_pb2 import Command

log = logging.getLogger(__name__)
#: Largest attribute value the ingest API takes (device_message.proto).
_MAX_ATTRIBUTE = 256


@dataclass(frozen=True)
class _Routed:
    """A received message ready to spool, and what is needed to acknowledge it."""

    endpoint: str
    message: NewMessage
    mid: int
    qos: int


@dataclass(frozen=True)
class _TopicDevice:
    """A plain-topic device: its route and the levels of its last data topic (for commands)."""

    route: TopicConfig
    levels: tuple[str, ...]


class MqttConnector(Connector):
    """Reads an edge MQTT broker (see the module docstring)."""

    def __init__(self, config: MqttConfig, sink: Sink) -> None:
        super().__init__(config.name, sink)
        self.config = config
        self._client: aiomqtt.Client | None = None
        #: Devices seen, by device id: where their commands go.
        self._devices: dict[str, sparkplug.SparkplugAddress | _TopicDevice] = {}

    # --- reading ---------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Stay subscribed until ``stop`` is set; reconnect with backoff when the link drops."""
        backoff = Backoff()
        while not stop.is_set():
            try:
                async with self._connect() as client:
                    self._client = client
                    backoff.reset()
                    filters = self._filters()
                    for topic_filter in filters:
                        await client.subscribe(topic_filter, qos=self.config.qos)
                    # Healthy once subscribed: a publisher waiting on /health loses nothing.
                    self.health.connected = True
                    log.info(
                        "subscribed on the edge broker",
                        extra={"connector": self.name, "filters": filters},
                    )
                    await self._pump(client, stop)
            except aiomqtt.MqttError as exc:
                self.health.error(f"edge broker: {exc}")
                log.warning(
                    "edge broker connection lost", extra={"connector": self.name, "error": str(exc)}
                )
            finally:
                self._client = None
                self.health.connected = False
            if await backoff.sleep(stop):
                break

    def _connect(self) -> aiomqtt.Client:
        b = self.config.broker
        tls = None
        if b.tls:
            tls = ssl.create_default_context(cafile=str(b.ca_file) if b.ca_file else None)
            if b.cert_file and b.key_file:
                tls.load_cert_chain(b.cert_file, b.key_file)
        client = aiomqtt.Client(
            b.host,
            b.port,
            identifier=b.client_id,
            clean_session=False,
            username=b.username,
            password=b.password,
            keepalive=b.keepalive_s,
            tls_context=tls,
            timeout=10,
        )
        # aiomqtt has no public switch for manual acknowledgement; paho's client (which it
        # wraps) has: with it, a QoS 1 message is acknowledged only by _acknowledge.
        client._client.manual_ack_set(True)
        return client

    def _filters(self) -> list[str]:
        filters = [t.filter for t in self.config.topics]
        if self.config.sparkplug is not None:
            filters += sparkplug.subscriptions(self.config.sparkplug)
        return filters

    async def _pump(self, client: aiomqtt.Client, stop: asyncio.Event) -> None:
        """Move messages from the broker to the spool in batches until stop or a lost link."""
        inbox: asyncio.Queue[aiomqtt.Message] = asyncio.Queue(self.config.batch_messages * 4)

        async def receive() -> None:
            async for message in client.messages:
                await inbox.put(message)

        receiver = asyncio.create_task(receive())
        stopped = asyncio.create_task(stop.wait())
        try:
            while True:
                getter = asyncio.create_task(inbox.get())
                await asyncio.wait([getter, receiver, stopped], return_when=asyncio.FIRST_COMPLETED)
                if not getter.done():
                    getter.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await getter
                    if stop.is_set():
                        return
                    receiver.result()  # the link is gone: raises MqttError
                    return
                batch = [getter.result()]
                while len(batch) < self.config.batch_messages and not inbox.empty():
                    batch.append(inbox.get_nowait())
                if not await self._spool(client, batch, stop):
                    return  # stopped while the spool was full: nothing acknowledged
        finally:
            for task in (receiver, stopped):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, aiomqtt.MqttError):
                    await task

    async def _spool(
        self, client: aiomqtt.Client, batch: Sequence[aiomqtt.Message], stop: asyncio.Event
    ) -> bool:
        """Spool a batch, then acknowledge what is on disk in arrival order.

        Runs of messages for one endpoint go in one transaction each, acknowledged as soon
        as they are on disk. False when ``stop`` came while the spool was full: the
        messages from there on stay unacknowledged.
        """
        routed = [self._route(m) for m in batch]
        can_wait = any(m.qos > 0 for m in batch)
        start = acked = 0
        while start < len(batch):
            first = routed[start]
            if first is None:  # not device data, or no valid device id: nothing to keep
                start += 1
                continue
            end = start + 1
            while (
                end < len(batch) and (r := routed[end]) is not None and r.endpoint == first.endpoint
            ):
                end += 1
            run = [r.message for r in routed[start:end] if r is not None]
            done = await self.sink.put(self.name, first.endpoint, run, can_wait, stop)
            self.health.values(done)
            # What is on disk is acknowledged at once: the sooner, the fewer duplicates
            # a crash can cause (a message spooled but not acknowledged comes again).
            self._acknowledge(client, batch[acked : start + done])
            acked = start + done
            if done < len(run):
                return False
            start = end
        self._acknowledge(client, batch[acked:])
        return True

    @staticmethod
    def _acknowledge(client: aiomqtt.Client, messages: Sequence[aiomqtt.Message]) -> None:
        """PUBACK ``messages`` in arrival order, as MQTT 3.1.1 (4.6) asks."""
        for m in messages:
            if m.qos > 0:
                client._client.ack(m.mid, m.qos)

    def _route(self, m: aiomqtt.Message) -> _Routed | None:
        """Return the device message for ``m``, or None (not device data, or unroutable)."""
        topic = m.topic.value
        payload = m.payload if isinstance(m.payload, bytes | bytearray) else str(m.payload).encode()
        spb = self.config.sparkplug
        if spb is not None and topic.startswith(sparkplug.NAMESPACE + "/"):
            parsed = sparkplug.parse_topic(topic, spb)
            if parsed is None:
                return None
            device_id, content_type, endpoint = parsed.device_id, parsed.content_type, spb.endpoint
            address: sparkplug.SparkplugAddress | _TopicDevice = parsed.address
        else:
            route = next((t for t in self.config.topics if m.topic.matches(t.filter)), None)
            if route is None:
                return None
            levels = tuple(topic.split("/"))
            try:
                device_id = route.device_id.format(*levels)
            except IndexError:
                device_id = ""
            content_type, endpoint = route.content_type, route.endpoint
            address = _TopicDevice(route, levels)
        if not DEVICE_ID.match(device_id):
            self.health.error(f"topic {topic[:200]!r} gives no valid device id ({device_id!r})")
            log.error(
                "message without a valid device id: not spooled, acknowledged",
                extra={"connector": self.name, "topic": topic[:200]},
            )
            return None
        self._devices[device_id] = address
        attributes = {"mqtt-topic": topic} if len(topic) <= _MAX_ATTRIBUTE else None
        message = NewMessage(
            device_id, content_type, bytes(payload), int(time.time() * 1000), attributes
        )
        return _Routed(endpoint, message, m.mid, m.qos)

    # --- commands ----------------------------------------------------------------------

    def owns(self, device_id: str) -> bool:
        """Return True for devices this connector has seen data from."""
        return device_id in self._devices

    async def command(self, command: Command) -> bytes | None:
        """Publish ``command`` to its device (QoS 1); EXECUTED once the broker has it."""
        address = self._devices[command.device_id]
        if isinstance(address, sparkplug.SparkplugAddress):
            topic = address.command_topic()
            payload = sparkplug.command_payload(command, address)
        else:
            if address.route.command_topic is None:
                raise RejectCommand(
                    "NO_COMMAND_TOPIC", f"connector {self.name} has no command_topic for it"
                )
            topic = address.route.command_topic.format(*address.levels, device_id=command.device_id)
            payload = bytes(command.payload)
        client = self._client
        if client is None:
            raise ConnectionError(f"connector {self.name} is not connected to the edge broker")
        await client.publish(topic, payload, qos=1)
        return json.dumps({"topic": topic}).encode()
