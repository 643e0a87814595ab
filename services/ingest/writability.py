"""Watch whether ingest's writes reach Kafka, and say why when they do not.

An ``acks=all`` write needs the partition's leader and ``min.insync.replicas`` in-sync
copies. When too few brokers are left (two of three down), every write waits its whole
produce timeout and fails DEADLINE_EXCEEDED, and the producer's errors never say why
(librdkafka retries silently; with the controller quorum gone too, the metadata still
shows every replica in sync). So two facts are joined here:

- what the write path saw (``WriteOutcomes``): writes have failed and none succeeded for
  ``FAILING_AFTER_S``: this replica cannot write at all;
- what the cluster says, looked at every ``INTERVAL_S``: partitions without a leader or
  with fewer in-sync replicas than their topic's ``min.insync.replicas``, and, while
  writes fail, which brokers do not answer when asked directly.

Reported three ways: one log line when the reason changes (and one when writes succeed
again), gauges (``ClusterGauges``), and ``on_change(writable, reason)``, which the server
turns into the health of ``headwater.ingest.v1.IngestService`` (docs/operations.md,
"Health"). The same look counts the cluster's under-replicated and offline partitions
(every topic, as the brokers' own metrics do; the alert rules read them from here, so they
work on a managed Kafka that exposes no broker metrics), and logs one line per look in
which partition leaders moved, however many messages were in flight.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from opentelemetry.metrics import Meter, Observation

from headwater.kafka.settings import KafkaSettings

log = logging.getLogger(__name__)
#: Seconds between two looks at the cluster: a metadata request per replica, each time.
INTERVAL_S = 5.0
#: Seconds a look may take; longer counts as "no broker answered".
ANSWER_WITHIN_S = 5.0
#: Writes failing and none succeeding for this long: this replica cannot write at all. Longer
#: than a leader election (10-20 s): while one partition elects, a gateway's frames, issued
#: in order and each with a record for it, may all wait, so no write is acknowledged at all.
FAILING_AFTER_S = 30.0


class WriteOutcomes:
    """What the write path saw: when a record was last acknowledged, and failures since.

    Fed once per frame (not per record) by ``write/frames.py``.
    """

    def __init__(self) -> None:
        self._last_ok = time.monotonic()
        self._failed_since_ok = 0

    def succeeded(self) -> None:
        """A record of a frame was acknowledged."""
        self._last_ok = time.monotonic()
        self._failed_since_ok = 0

    def failed(self) -> None:
        """A frame's record failed at the broker (a timeout, or a retriable error)."""
        self._failed_since_ok += 1

    def failing(self, now: float) -> str:
        """Why writes are failing ("" unless they failed and none succeeded for a while)."""
        if self._failed_since_ok and now - self._last_ok >= FAILING_AFTER_S:
            return f"writes fail and none was acknowledged for {FAILING_AFTER_S:.0f}s or more"
        return ""


@dataclass(frozen=True)
class PartitionState:
    """One partition as the cluster's metadata shows it."""

    topic: str
    partition: int
    leader: int  # -1: none (offline)
    replicas: int
    in_sync: int
    min_in_sync: int

    @property
    def name(self) -> str:
        """``topic[partition]``."""
        return f"{self.topic}[{self.partition}]"

    @property
    def problem(self) -> str:
        """Why an ``acks=all`` write to it fails now ("" when it can be written)."""
        if self.leader < 0:
            return "no leader"
        if self.in_sync < self.min_in_sync:
            return f"{self.in_sync} in-sync replica(s), min.insync.replicas={self.min_in_sync}"
        return ""


def unwritable_reason(states: Iterable[PartitionState]) -> str:
    """Name the partitions that cannot be written and why, grouped by cause ("" if none)."""
    by_problem: dict[str, list[str]] = {}
    for state in states:
        if state.problem:
            by_problem.setdefault(state.problem, []).append(state.name)
    return "; ".join(f"{', '.join(names)}: {problem}" for problem, names in by_problem.items())


def moved_leaders(before: dict[str, int], now: dict[str, int]) -> list[str]:
    """``"<partition>: node A -> node B"`` for each partition whose known leader changed."""
    return [
        f"{name}: node {before[name]} -> {'none' if leader < 0 else f'node {leader}'}"
        for name, leader in sorted(now.items())
        if before.get(name, leader) != leader and before[name] >= 0
    ]


class ClusterGauges:
    """What the last look found, exported as gauges (read at collection time)."""

    def __init__(self, meter: Meter) -> None:
        self.unwritable: dict[str, int] = {}
        self.under_replicated = 0
        self.offline = 0
        self.writable = True
        gauge = meter.create_observable_gauge
        gauge(
            "headwater.ingest.unwritable.partitions",
            callbacks=[self._unwritable],
            unit="{partition}",
            description="Ingest partitions that cannot take an acks=all write (no leader, or "
            "fewer in-sync replicas than min.insync.replicas), by topic",
        )
        gauge(
            "headwater.ingest.kafka.under.replicated.partitions",
            callbacks=[lambda _options: [Observation(self.under_replicated)]],
            unit="{partition}",
            description="Partitions of the cluster (every topic) with a replica out of sync",
        )
        gauge(
            "headwater.ingest.kafka.offline.partitions",
            callbacks=[lambda _options: [Observation(self.offline)]],
            unit="{partition}",
            description="Partitions of the cluster (every topic) without a leader",
        )
        gauge(
            "headwater.ingest.kafka.writable",
            callbacks=[lambda _options: [Observation(int(self.writable))]],
            unit="1",
            description="1 while this replica's writes are acknowledged, 0 while they all fail",
        )

    def _unwritable(self, _options: Any) -> list[Observation]:
        return [Observation(n, {"topic": t}) for t, n in dict(self.unwritable).items()]

    def record(self, states: list[PartitionState], ingest_topics: set[str]) -> None:
        """Count what ``states`` (every partition of the cluster) show."""
        counts = {t: 0 for t in sorted({s.topic for s in states} & ingest_topics)}
        for s in states:
            if s.topic in counts and s.problem:
                counts[s.topic] += 1
        self.unwritable = counts
        self.under_replicated = sum(1 for s in states if s.in_sync < s.replicas)
        self.offline = sum(1 for s in states if s.leader < 0)


class WritabilityWatch:
    """Looks at the cluster every ``interval_s`` until cancelled (module docstring).

    ``topics`` are the ones ingest writes. ``on_change(writable, reason)`` is awaited when
    the answer to "can this replica write at all" changes; ``reason`` says why.
    """

    def __init__(
        self,
        kafka: KafkaSettings,
        topics: Iterable[str],
        outcomes: WriteOutcomes,
        on_change: Callable[[bool, str], Awaitable[None]],
        meter: Meter | None = None,
        interval_s: float = INTERVAL_S,
    ) -> None:
        self._kafka = kafka
        self._outcomes = outcomes
        self._topics = set(topics)
        self._on_change = on_change
        self._interval_s = interval_s
        self._min_in_sync: dict[str, int] = {}
        self._leaders: dict[str, int] = {}
        self._reason = ""
        self.writable = True
        self._gauges = ClusterGauges(meter) if meter is not None else None

    async def run(self) -> None:
        """Look, report, sleep; until cancelled."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient(self._kafka.admin_config("headwater-ingest-watch") | {"log_level": 0})
        # A thread of its own: a look at a dead broker blocks for seconds, and must not hold
        # the default executor the write path and the commands share.
        looker = ThreadPoolExecutor(1, thread_name_prefix="kafka-watch")
        loop = asyncio.get_running_loop()
        try:
            while True:
                await self._look_once(loop, looker, admin)
                await asyncio.sleep(self._interval_s)
        finally:
            looker.shutdown(wait=False, cancel_futures=True)

    async def _look_once(
        self, loop: asyncio.AbstractEventLoop, looker: ThreadPoolExecutor, admin: Any
    ) -> None:
        """Look once and report; the metadata first, the brokers one by one only if failing."""
        failing = self._outcomes.failing(time.monotonic())
        try:
            states, brokers = await loop.run_in_executor(looker, self._look, admin)
        except Exception as exc:  # no broker answered: nothing can be written either
            await self._report(None, failing, f"no broker answered a metadata request: {exc}")
            return
        cluster = unwritable_reason(s for s in states if s.topic in self._topics)
        if failing:
            silent = await loop.run_in_executor(looker, self._silent_brokers, brokers)
            cluster = "; ".join(filter(None, [silent, cluster]))
        await self._report(states, failing, cluster)

    def _look(self, admin: Any) -> tuple[list[PartitionState], list[Any]]:
        """Every topic's partitions and the brokers, now (blocking: run on a thread)."""
        meta = admin.list_topics(timeout=ANSWER_WITHIN_S)
        if not meta.brokers:
            raise RuntimeError("the cluster lists no broker")
        present = {name for name, topic in meta.topics.items() if not topic.error}
        new = sorted((present & self._topics) - set(self._min_in_sync))
        self._learn_min_in_sync(admin, new)
        states = [
            PartitionState(
                t, p.id, p.leader, len(p.replicas), len(p.isrs), self._min_in_sync.get(t, 1)
            )
            for t in sorted(present)
            for p in meta.topics[t].partitions.values()
        ]
        return states, list(meta.brokers.values())

    def _learn_min_in_sync(self, admin: Any, topics: list[str]) -> None:
        """Read each topic's ``min.insync.replicas`` once (it is a topic's setting)."""
        if not topics:
            return
        from confluent_kafka.admin import ConfigResource, ResourceType

        resources = [ConfigResource(ResourceType.TOPIC, t) for t in topics]
        for resource, future in admin.describe_configs(resources).items():
            try:
                entry = future.result(timeout=ANSWER_WITHIN_S).get("min.insync.replicas")
            except Exception:  # asked again at the next look
                continue
            if entry is not None and entry.value is not None:
                self._min_in_sync[resource.name] = int(entry.value)

    def _silent_brokers(self, brokers: list[Any]) -> str:
        """Name the brokers of the metadata that do not answer when asked directly.

        Only while writes fail: a dead broker stays in the metadata until the controller
        fences it, and never leaves it while the controller quorum is lost.
        """
        from confluent_kafka.admin import AdminClient

        silent = []
        for broker in sorted(brokers, key=lambda b: b.id):
            direct = AdminClient(
                self._kafka.admin_config("headwater-ingest-watch")
                | {"bootstrap.servers": f"{broker.host}:{broker.port}", "log_level": 0}
            )
            try:
                direct.list_topics(timeout=2)
            except Exception:
                silent.append(f"node {broker.id} ({broker.host}:{broker.port})")
        if not silent:
            return ""
        return f"{len(silent)} of {len(brokers)} brokers do not answer: {', '.join(silent)}"

    async def _report(
        self, states: list[PartitionState] | None, failing: str, cluster: str
    ) -> None:
        if states is not None:
            leaders = {s.name: s.leader for s in states if s.topic in self._topics}
            moved = moved_leaders(self._leaders, leaders)
            if moved:
                log.warning("Kafka partition leaders moved", extra={"moved": moved})
            self._leaders = leaders
            if self._gauges is not None:
                self._gauges.record(states, self._topics)
        writable = not failing
        reason = "; ".join(filter(None, [failing, cluster]))
        if reason != self._reason:
            if reason:
                log.error(
                    "Kafka cannot take some or all of ingest's writes (acks=all)",
                    extra={"reason": reason, "writes_failing": bool(failing)},
                )
            else:
                log.info("Kafka takes ingest's writes again")
            self._reason = reason
        if self._gauges is not None:
            self._gauges.writable = writable
        if writable != self.writable:
            self.writable = writable
            await self._on_change(writable, reason)
