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
from dataclasses import dataclass, field
from pathlib import Path

from headwater.gateway.client import DeliveryReport, GatewayClient, GatewayConfig
from headwater.gateway.spool import Spool
from headwater.proto.device.v1 import device_message_pb2
from headwater.topics import INGEST_TOPICS
from headwater_dev.devstack import vendors
from headwater_dev.devstack.commands import handle


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
    #: Enqueue to OK, per delivered message (spool wait + call).
    call_latencies_s: list[float] = field(default_factory=list)
    #: Attempts that will be retried, by reason (overload, outage, bad credentials).
    retried: Counter[str] = field(default_factory=Counter)
    #: Messages left in each gateway's spool at the end (the rogue gateway's, by design).
    still_spooled: dict[str, int] = field(default_factory=dict)
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
            SimDevice(
                f"acme-{g:03d}-{d:04d}",
                vendors.TELEMETRY_FORMATS[(g + d) % len(vendors.TELEMETRY_FORMATS)],
            )
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
    """Drives one simulated gateway: its devices write into a spool, the gateway client sends.

    The gateway library (``headwater.gateway``) does the sending, so every dev-stack run
    exercises its spool, stream/batch sender, retries and rejections.
    """

    def __init__(
        self,
        gateway: SimGateway,
        target: str,
        spool_dir: Path,
        stats: FleetStats,
        mix: FleetMix,
        rng: random.Random,
        max_payload_bytes: int,
        batch: int,
    ) -> None:
        self._gw = gateway
        self._stats = stats
        self._mix = mix
        self._rng = rng
        self._max_payload = max_payload_bytes
        # NORMAL: a dev run needs crash safety, not power-loss safety (fewer fsyncs).
        self._spool = Spool(spool_dir / f"{gateway.gateway_id}.db", synchronous="NORMAL")
        config = GatewayConfig(
            target=target,
            token=gateway.token,
            use_stream=gateway.use_stream,
            frame_messages=batch,
            call_timeout_s=10.0,
        )
        # Every simulated gateway takes commands (devstack/commands.py).
        self._client = GatewayClient(self._spool, config, self._outcome, commands=handle)
        self._enqueued_at: dict[str, float] = {}
        self._sent: dict[str, tuple[str, device_message_pb2.DeviceMessage]] = {}
        self._delivered: list[str] = []
        #: Sparkplug B devices that have sent their birth certificate (DBIRTH).
        self._born: set[str] = set()

    def _outcome(self, outcome: DeliveryReport) -> None:
        if outcome.endpoint not in INGEST_TOPICS:
            return  # command reports: the summary follows them by the commands' states
        if outcome.status == "delivered":
            topic = INGEST_TOPICS[outcome.endpoint]
            self._stats.acked.setdefault(
                outcome.message_id, (topic, outcome.partition, outcome.offset)
            )
            self._stats.first_ack_ms.setdefault(outcome.message_id, int(time.time() * 1000))
            started = self._enqueued_at.pop(outcome.message_id, None)
            if started is not None:
                self._stats.call_latencies_s.append(time.monotonic() - started)
            self._delivered = [*self._delivered[-50:], outcome.message_id]
        elif outcome.status == "rejected":
            self._stats.rejected[outcome.reason or outcome.code] += 1
        else:
            self._stats.retried[outcome.reason or outcome.code] += 1

    def _enqueue_one(self) -> None:
        """Spool one message, sometimes a bad or special one (runs in a worker thread)."""
        rng, mix = self._rng, self._mix
        # Only kinds that are kept in _sent are resent; an ack can also arrive (event loop)
        # before this thread has recorded its message.
        resendable = [m for m in self._delivered if m in self._sent]
        if resendable and rng.random() < mix.duplicate:
            endpoint, msg = self._sent[rng.choice(resendable)]
            if self._spool.enqueue_message(endpoint, msg).messages:  # a resend, same id
                self._stats.duplicates_sent += 1
                self._stats.sent += 1
            return
        device = rng.choice(self._gw.devices)
        endpoint, device_id, content_type = "telemetry", device.device_id, device.content_type
        reading = vendors.random_reading(rng)
        payload = vendors.telemetry_payload(device.content_type, reading)
        kind = _pick_kind(rng.random(), mix)
        if device.content_type == vendors.SPARKPLUG_B:
            if device_id not in self._born:  # a Sparkplug device's first message: its DBIRTH
                self._born.add(device_id)
                kind, content_type = "normal", vendors.SPARKPLUG_BIRTH
                payload = vendors.sparkplug_payload(reading, birth=True)
            else:
                content_type = vendors.SPARKPLUG_DATA
        if kind == "poison":
            payload = vendors.poison_payload(device.content_type)
            self._stats.poison_sent += 1
        elif kind == "oversized":
            payload = b"x" * (self._max_payload + 1)
        elif kind == "foreign_device":
            device_id = "globex-0001"
        elif kind == "unknown_format":
            content_type = "application/vnd.unknown+octet-stream"
        elif kind == "alarm":
            endpoint, content_type, payload = (
                "alarms",
                vendors.ACME_ALARM,
                vendors.alarm_payload(rng),
            )
        attributes = {"gateway": self._gw.gateway_id}
        if kind == "invalid_envelope":
            msg = device_message_pb2.DeviceMessage(
                message_id="not a valid id!",
                device_id=device_id,
                content_type=content_type,
                payload=payload,
            )
            msg.device_time.GetCurrentTime()
            self._spool.enqueue_message(endpoint, msg)
        else:
            msg = self._spool.enqueue(
                endpoint, device_id, content_type, payload, attributes=attributes
            ).message
            if kind in ("normal", "poison", "alarm"):
                self._sent[msg.message_id] = (endpoint, msg)
        self._enqueued_at[msg.message_id] = time.monotonic()
        self._stats.sent += 1

    async def run(self, rate: float, batch: int, until: float, drain_s: float = 15.0) -> None:
        """Produce ``rate`` messages per second until ``until``, then let the spool drain.

        The drain lasts while the client still makes progress, at most ``drain_s``.
        """
        stop = asyncio.Event()
        sender = asyncio.create_task(self._client.run(stop))
        interval = batch / rate
        try:
            while time.monotonic() < until:
                started = time.monotonic()
                for _ in range(batch):
                    await asyncio.to_thread(self._enqueue_one)
                self._client.notify()
                await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))
            deadline, last_acked = time.monotonic() + drain_s, -1
            while time.monotonic() < deadline and self._spool.depth:
                acked = len(self._stats.acked)
                if acked == last_acked:  # no progress for a second: what is left stays spooled
                    break
                last_acked = acked
                await asyncio.sleep(1.0)
        finally:
            stop.set()
            await sender
            await self._client.close()
            self._stats.still_spooled[self._gw.gateway_id] = self._spool.depth
            self._spool.close()


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
    spool_dir: Path,
    seed: int = 7,
    batch: int = 20,
) -> None:
    """Run every gateway for ``duration_s`` at ``rate`` messages per second in total."""
    until = time.monotonic() + duration_s
    per_gateway = rate / len(fleet)
    # The rogue gateway only knocks now and then; it is there to show UNAUTHENTICATED.
    rates = [per_gateway / 10 if gw.gateway_id == "gw-rogue" else per_gateway for gw in fleet]
    sims = [
        GatewaySimulator(
            gw,
            target,
            spool_dir,
            stats,
            FleetMix(),
            random.Random(seed + i),
            max_payload_bytes,
            batch,
        )
        for i, gw in enumerate(fleet)
    ]
    await asyncio.gather(
        *(sim.run(gw_rate, batch, until) for sim, gw_rate in zip(sims, rates, strict=True))
    )
