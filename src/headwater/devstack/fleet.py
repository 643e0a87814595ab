"""A simulated fleet of edge gateways for the dev stack.

Each gateway owns a few devices of different vendor formats and sends at a steady rate,
over a long-lived stream or with batch calls. The mix includes what real fleets send:
poison payloads, duplicates (resends with the same message id), oversized payloads,
invalid envelopes, devices outside the gateway's binding, unknown formats, alarms, and
one gateway with a bad token.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import grpc
from google.protobuf.timestamp_pb2 import Timestamp
from grpc_status import rpc_status

from headwater.devstack import vendors
from headwater.proto.device.v1 import device_message_pb2
from headwater.proto.ingest.v1 import ingest_messages_pb2 as api
from headwater.proto.ingest.v1 import ingest_service_pb2_grpc
from headwater.topics import INGEST_TOPICS


@dataclass(frozen=True)
class SimDevice:
    """A simulated device and the format it speaks."""

    device_id: str
    content_type: str


@dataclass(frozen=True)
class SimGateway:
    """A simulated gateway: credentials, devices, and how it sends."""

    gateway_id: str
    tenant: str
    token: str
    devices: tuple[SimDevice, ...]
    use_stream: bool


@dataclass
class FleetStats:
    """What the fleet saw: every ack (to check against Kafka) and every rejection."""

    sent: int = 0
    acked: dict[str, tuple[str, int, int]] = field(default_factory=dict)
    rejected: Counter[str] = field(default_factory=Counter)
    call_latencies_s: list[float] = field(default_factory=list)
    duplicates_sent: int = 0
    poison_sent: int = 0
    first_ack_ms: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class FleetMix:
    """Fractions of each kind of bad or special message."""

    poison: float = 0.02
    duplicate: float = 0.02
    oversized: float = 0.005
    invalid_envelope: float = 0.005
    foreign_device: float = 0.005
    unknown_format: float = 0.005
    alarm: float = 0.05


def build_fleet(gateways: int, devices_per_gateway: int, rng: random.Random) -> list[SimGateway]:
    """Return ``gateways`` well-behaved gateways plus one with a bad token."""
    fleet = []
    for g in range(gateways):
        gid = f"gw-{g:03d}"
        devices = tuple(
            SimDevice(f"acme-{g:03d}-{d:04d}", vendors.TELEMETRY_FORMATS[(g + d) % 3])
            for d in range(devices_per_gateway)
        )
        fleet.append(SimGateway(gid, "acme", uuid.uuid4().hex, devices, use_stream=g % 2 == 0))
    rogue = SimGateway(
        "gw-rogue",
        "acme",
        "not-a-valid-token",
        (SimDevice("acme-rogue-0001", vendors.ACME_TELEMETRY),),
        False,
    )
    return [*fleet, rogue]


class GatewaySimulator:
    """Drives one simulated gateway against the ingest service."""

    def __init__(
        self,
        gateway: SimGateway,
        channel: grpc.aio.Channel,
        stats: FleetStats,
        mix: FleetMix,
        rng: random.Random,
        max_payload_bytes: int,
    ) -> None:
        self._gw = gateway
        self._stub = ingest_service_pb2_grpc.IngestServiceStub(channel)
        self._stats = stats
        self._mix = mix
        self._rng = rng
        self._max_payload = max_payload_bytes
        self._sequence: Counter[str] = Counter()
        self._recent: list[device_message_pb2.DeviceMessage] = []
        self._metadata = (("authorization", f"Bearer {gateway.token}"),)

    def _message(self) -> tuple[str, device_message_pb2.DeviceMessage]:
        """Return (endpoint, message), sometimes a bad or special one."""
        rng, mix = self._rng, self._mix
        roll = rng.random()
        if self._recent and roll < mix.duplicate:
            self._stats.duplicates_sent += 1
            return "telemetry", rng.choice(self._recent)
        device = rng.choice(self._gw.devices)
        self._sequence[device.device_id] += 1
        ts = Timestamp()
        ts.FromMilliseconds(int(time.time() * 1000))
        msg = device_message_pb2.DeviceMessage(
            message_id=str(uuid.uuid4()),
            device_id=device.device_id,
            device_time=ts,
            sequence=self._sequence[device.device_id],
            content_type=device.content_type,
            payload=vendors.telemetry_payload(device.content_type, vendors.random_reading(rng)),
            attributes={"gateway": self._gw.gateway_id},
        )
        endpoint = "telemetry"
        kind = _pick_kind(rng.random(), mix)
        if kind == "poison":
            msg.payload = vendors.poison_payload(device.content_type)
            self._stats.poison_sent += 1
        elif kind == "oversized":
            msg.payload = b"x" * (self._max_payload + 1)
        elif kind == "invalid_envelope":
            msg.message_id = "not a valid id!"
        elif kind == "foreign_device":
            msg.device_id = "globex-0001"
        elif kind == "unknown_format":
            msg.content_type = "application/vnd.unknown+octet-stream"
        elif kind == "alarm":
            msg.content_type = vendors.ACME_ALARM
            msg.payload = vendors.alarm_payload(rng)
            endpoint = "alarms"
        if kind in ("normal", "poison", "alarm"):
            self._recent = [*self._recent[-50:], msg]
        return endpoint, msg

    def _record(
        self,
        endpoint: str,
        messages: list[device_message_pb2.DeviceMessage],
        results: list[api.MessageResult],
    ) -> None:
        now_ms = int(time.time() * 1000)
        for msg, result in zip(messages, results, strict=False):
            if result.code == 0:
                self._stats.acked.setdefault(
                    msg.message_id, (INGEST_TOPICS[endpoint], result.partition, result.offset)
                )
                self._stats.first_ack_ms.setdefault(msg.message_id, now_ms)
            else:
                self._stats.rejected[result.error.reason or str(result.code)] += 1

    def _record_call_error(self, exc: grpc.aio.AioRpcError, count: int) -> None:
        reason = exc.code().name
        status = rpc_status.from_call(exc)
        if status is not None:
            from google.rpc import error_details_pb2

            for detail in status.details:
                info = error_details_pb2.ErrorInfo()
                if detail.Unpack(info):
                    reason = info.reason
        self._stats.rejected[reason] += count

    async def run_batches(self, rate: float, batch: int, until: float) -> None:
        """Send batch calls of ``batch`` messages at ``rate`` messages per second."""
        interval = batch / rate
        while time.monotonic() < until:
            started = time.monotonic()
            by_endpoint: dict[str, list[device_message_pb2.DeviceMessage]] = {
                "telemetry": [],
                "alarms": [],
            }
            for _ in range(batch):
                endpoint, msg = self._message()
                by_endpoint[endpoint].append(msg)
            for endpoint, messages in by_endpoint.items():
                if messages:
                    await self._publish(endpoint, messages)
            await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))

    async def _publish(
        self, endpoint: str, messages: list[device_message_pb2.DeviceMessage]
    ) -> None:
        self._stats.sent += len(messages)
        call = self._stub.PublishAlarms if endpoint == "alarms" else self._stub.PublishTelemetry
        request_type = (
            api.PublishAlarmsRequest if endpoint == "alarms" else api.PublishTelemetryRequest
        )
        started = time.perf_counter()
        try:
            response = await call(
                request_type(messages=messages), metadata=self._metadata, timeout=10
            )
        except grpc.aio.AioRpcError as exc:
            self._record_call_error(exc, len(messages))
            return
        self._stats.call_latencies_s.append(time.perf_counter() - started)
        self._record(endpoint, messages, list(response.results))

    async def run_stream(self, rate: float, batch: int, until: float) -> None:
        """Send telemetry frames on one long-lived stream (alarms still go by batch call)."""
        sent_at: dict[int, tuple[float, list[device_message_pb2.DeviceMessage]]] = {}
        alarms: list[device_message_pb2.DeviceMessage] = []
        interval = batch / rate

        async def frames() -> AsyncIterator[api.StreamTelemetryRequest]:
            frame_id = 0
            while time.monotonic() < until:
                started = time.monotonic()
                telemetry: list[device_message_pb2.DeviceMessage] = []
                for _ in range(batch):
                    endpoint, msg = self._message()
                    (alarms if endpoint == "alarms" else telemetry).append(msg)
                if telemetry:
                    frame_id += 1
                    sent_at[frame_id] = (time.perf_counter(), telemetry)
                    self._stats.sent += len(telemetry)
                    yield api.StreamTelemetryRequest(frame_id=frame_id, messages=telemetry)
                if alarms:
                    await self._publish("alarms", alarms[:])
                    alarms.clear()
                await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))

        try:
            async for answer in self._stub.StreamTelemetry(frames(), metadata=self._metadata):
                started, messages = sent_at.pop(answer.frame_id)
                self._stats.call_latencies_s.append(time.perf_counter() - started)
                self._record("telemetry", messages, list(answer.results))
        except grpc.aio.AioRpcError as exc:
            self._record_call_error(exc, sum(len(m) for _, m in sent_at.values()) or 1)


def _pick_kind(roll: float, mix: FleetMix) -> str:
    """Map a uniform random number to a kind of message, by the mix's shares."""
    for kind in (
        "poison",
        "oversized",
        "invalid_envelope",
        "foreign_device",
        "unknown_format",
        "alarm",
    ):
        share = getattr(mix, kind)
        if roll < share:
            return kind
        roll -= share
    return "normal"


async def run_fleet(
    target: str,
    fleet: list[SimGateway],
    stats: FleetStats,
    rate: float,
    duration_s: float,
    max_payload_bytes: int,
    seed: int = 7,
    batch: int = 20,
) -> None:
    """Run every gateway for ``duration_s`` at ``rate`` messages per second in total."""
    until = time.monotonic() + duration_s
    per_gateway = rate / len(fleet)
    # The rogue gateway only knocks now and then; it is there to show UNAUTHENTICATED.
    rates = [per_gateway / 10 if gw.gateway_id == "gw-rogue" else per_gateway for gw in fleet]
    async with grpc.aio.insecure_channel(target) as channel:
        sims = [
            GatewaySimulator(
                gw, channel, stats, FleetMix(), random.Random(seed + i), max_payload_bytes
            )
            for i, gw in enumerate(fleet)
        ]
        await asyncio.gather(
            *(
                sim.run_stream(gw_rate, batch, until)
                if gw.use_stream
                else sim.run_batches(gw_rate, batch, until)
                for sim, gw, gw_rate in zip(sims, fleet, rates, strict=True)
            )
        )
