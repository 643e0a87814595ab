"""The enricher on a Spark standalone cluster while its processes die: nothing is lost.

On Kubernetes executors are lost routinely (node drains, spot instances, OOM kills): the
tasks they ran are retried on another executor and the keyed state they held reloads there
from the checkpoint. In Spark's local mode none of that can happen, so this test runs the
enricher (``headwater enricher run``, a driver of its own) on a real standalone cluster of
two one-core workers (tests/support/spark_standalone.py) while messages flow steadily:

1. one executor JVM is SIGKILLed mid-stream (the worker launches another);
2. a whole worker is SIGKILLed with its executor (a lost node) and a replacement joins;
3. then the driver is SIGKILLed, and started again on the same checkpoint (with the shipped
   batch cap and trigger interval, as a production restart: :data:`SMALL_BATCHES`).

After each: every message has exactly one distinct terminal completion (a task retried or a
batch replayed may write a completion twice, never a different one), gateway resends after
the executor kill are recognized as duplicates (the dedup state reloaded, not lost), and
each device's last snapshot counts every message once, in sequence, without a gap.

Issue 36's target for each fault, end-to-end p99 back under 2 s within 30 s of it, is measured
and printed, not asserted (a figure of the machine): the traffic goes on after a fault until
the p99 of the messages sent in a sliding 5 s window has been back under 2 s for 15 s
(``headwater_dev.devstack.p99_window``), or for at most ``OBSERVE_S``. A message's latency
runs from its send to the time Kafka stamped its first terminal completion. Figures are
printed (``pytest -s``) and kept in docs/benchmarks.md.
"""

from __future__ import annotations

import math
import os
import signal
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from headwater.enricher.topics import EnricherTopics
from headwater.kafka.read import read_topic
from headwater.proto.events.v1 import device_state_pb2
from headwater_dev.devstack.p99_window import (
    HOLD_S,
    P99_BOUND_MS,
    WINDOW_S,
    seconds_back_under,
)
from headwater_dev.devstack.spark_cluster import SparkStandalone
from tests.support.kafkatools import (
    ACME,
    TERMINAL,
    Msg,
    TopicReader,
    acme,
    completions,
    envelope,
    ingest,
    ingest_headers,
    make_topics,
    master,
    outcome,
    producer,
    start_enricher,
)

pytestmark = [pytest.mark.cluster, pytest.mark.spark]

DEVICES = 6
#: Steady traffic around each fault: RATE messages a second; the fault once FAULT_AFTER of
#: them are complete, then at least FEED_AFTER_S more seconds of it, and on until the p99 is
#: back under 2 s for good or OBSERVE_S have passed. MAX_FEED bounds a phase. OBSERVE_S is
#: twice the 30 s target: beyond it the figure only says "not within 60", and each further
#: second of feeding is the ``cluster`` step's time in CI (150 s made the test 585 s).
RATE, FAULT_AFTER, FEED_AFTER_S, OBSERVE_S, MAX_FEED = 10.0, 20, 10.0, 60.0, 2400
#: What every driver of the test runs with: the machine's fit (two one-core workers).
CLUSTER = {"SHUFFLE_PARTITIONS": "2", "DRIVER_MEMORY": "768m"}
#: The first driver's small batches, so that each fault lands in the middle of a stream of
#: them. The restarted driver (phase 3) has no fault of its own to land: it runs with the
#: enricher's defaults, ``max_records_per_trigger`` 20,000 (the chart's 50,000 would take
#: this backlog of a few hundred in one batch all the same) and ``trigger_interval_seconds``
#: 1 s (the chart's too), as a production driver restarted would, so that its "p99 back" is
#: what a user sees. Both, not the cap alone: a restart with the test's 200 ms interval
#: would be a driver nobody ships, and its shorter wait between batches would flatter the
#: figure.
SMALL_BATCHES = CLUSTER | {"MAX_RECORDS_PER_TRIGGER": "40", "TRIGGER_INTERVAL_SECONDS": "0.2"}
#: Generous: a driver's start on a loaded two-core machine (JVM, application, executors).
START_S = 240.0
RECOVER_S = 240.0


@dataclass
class Fleet:
    """Devices whose messages carry gap-free sequences across every phase."""

    devices: int
    sent: list[Msg] = field(default_factory=list)

    def next(self, prefix: str, count: int) -> list[Msg]:
        """The next ``count`` messages, ids ``<prefix>-<n>``, each device's next sequence."""
        msgs = []
        for i in range(count):
            n = len(self.sent) + i
            device = f"dev-{n % self.devices}"
            msgs.append(Msg(f"{prefix}-{n}", device, ACME, acme(n % 40, 50), n // self.devices + 1))
        self.sent += msgs
        return msgs


class Feed(threading.Thread):
    """Sends the fleet's next messages at ``RATE`` a second until told to stop.

    As gateways keep sending through a fault: the test stops it a while after the fault,
    whenever that comes; :data:`MAX_FEED` bounds it whatever happens.
    """

    def __init__(self, bootstrap: str, topic: str, fleet: Fleet, prefix: str) -> None:
        super().__init__(daemon=True)
        self._producer = producer(bootstrap)
        self._topic, self._fleet, self._prefix = topic, fleet, prefix
        self._enough = threading.Event()
        self.sent_at: dict[str, float] = {}
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            start = time.monotonic()
            for i in range(MAX_FEED):
                if self._enough.wait(max(0.0, start + i / RATE - time.monotonic())):
                    break
                (m,) = self._fleet.next(self._prefix, 1)
                headers = ingest_headers(m)
                self._producer.produce(
                    self._topic, key=m.device_id.encode(), value=envelope(m), headers=headers
                )
                self._producer.poll(0)
                self.sent_at[m.message_id] = time.monotonic()
            assert self._producer.flush(30) == 0
        except BaseException as exc:  # re-raised in the test's thread by finish()
            self.error = exc

    def finish(self) -> set[str]:
        """Stop sending; return the ids of every message sent."""
        self._enough.set()
        self.join(60)
        if self.error is not None:
            raise self.error
        return set(self.sent_at)


class Completions:
    """Reads completions.v1; remembers when each message's first terminal one was written.

    When Kafka stamped it (the enricher's producer), on the test's monotonic clock: the
    consumer's polls would add up to half a second to a latency.
    """

    def __init__(self, bootstrap: str, topic: str) -> None:
        self._reader = TopicReader(bootstrap, topic)
        self.first_seen: dict[str, float] = {}

    def _poll(self) -> None:
        wall_minus_monotonic = time.time() - time.monotonic()
        for record in self._reader.poll(0.5):
            (c,) = completions([record])
            if outcome(c) in TERMINAL:
                written = record.timestamp()[1] / 1000 - wall_minus_monotonic
                self.first_seen.setdefault(c.message_id, written)

    def wait(self, ids: set[str], timeout_s: float, tick: Callable[[], None]) -> None:
        """Poll until every message of ``ids`` has a terminal completion."""
        deadline = time.monotonic() + timeout_s
        while not ids <= self.first_seen.keys():
            missing = len(ids - self.first_seen.keys())
            assert time.monotonic() < deadline, f"{missing} messages without a completion"
            tick()
            self._poll()

    def wait_count(self, ids: Callable[[], set[str]], count: int, tick: Callable[[], None]) -> None:
        """Poll until ``count`` messages of ``ids()`` have one (mid-stream: a fault comes next)."""
        deadline = time.monotonic() + START_S
        while len(ids() & self.first_seen.keys()) < count:
            assert time.monotonic() < deadline, "the stream never got going"
            tick()
            self._poll()

    def back_under_s(self, sent_at: dict[str, float], fault: float, until: float) -> float | None:
        """Seconds from ``fault`` until the p99 of messages sent was back under 2 s for good.

        Windows of send times up to ``until``; a message still without a completion counts as
        infinitely late. None when the p99 was not back (yet).
        """
        order = sorted(sent_at.items(), key=lambda sent: sent[1])
        latency_ms = [
            (self.first_seen[i] - at) * 1000 if i in self.first_seen else math.inf
            for i, at in order
        ]
        times_ms = [at * 1000 for _, at in order]
        return seconds_back_under(times_ms, latency_ms, fault * 1000, until * 1000)

    def until_back_under(
        self, sent_at: Callable[[], dict[str, float]], fault: float, tick: Callable[[], None]
    ) -> None:
        """Poll until the p99 is back under 2 s for good, or ``OBSERVE_S`` after ``fault``."""
        while time.monotonic() < fault + OBSERVE_S:
            tick()
            self._poll()
            # Windows whose messages are each complete or already later than the bound.
            settled = time.monotonic() - P99_BOUND_MS / 1000
            if self.back_under_s(sent_at(), fault, settled) is not None:
                return

    def terminal(self) -> dict[str, list[tuple[str, tuple[str, ...]]]]:
        """Every terminal completion read, per message: (outcome, event ids)."""
        self._reader.poll(1.0)
        found: dict[str, list[tuple[str, tuple[str, ...]]]] = {}
        for c in completions(self._reader.records):
            if outcome(c) in TERMINAL:
                found.setdefault(c.message_id, []).append(
                    (outcome(c), tuple(e.event_id for e in c.events))
                )
        return found

    def close(self) -> None:
        self._reader.close()


def running(proc: object) -> Callable[[], None]:
    def tick() -> None:
        if proc.poll() is not None:  # type: ignore[attr-defined]
            pytest.fail(f"the enricher exited ({proc.returncode}) before the test was done")  # type: ignore[attr-defined]

    return tick


def fault_under_feed(
    bootstrap: str,
    topics: EnricherTopics,
    done: Completions,
    fleet: Fleet,
    prefix: str,
    fault: Callable[[], Callable[[], None]],
) -> dict[str, float]:
    """Feed messages steadily, strike ``fault`` mid-stream, feed on, wait for all of them.

    ``fault`` does the damage and returns the tick to poll while waiting (the driver it
    started again, say). Returns the figures: the latency before, the seconds from the
    fault to the first completion of a message sent after it, the worst latency after, and
    the seconds from the fault until the p99 was back under 2 s for good (inf: not within
    ``OBSERVE_S``).
    """
    feed = Feed(bootstrap, topics.ingest[0], fleet, prefix)
    feed.start()
    done.wait_count(lambda: set(feed.sent_at), FAULT_AFTER, lambda: None)
    sent = dict(feed.sent_at)  # one copy: the feed's thread adds to it meanwhile
    before = [done.first_seen[i] - at for i, at in sent.items() if i in done.first_seen]
    struck = time.monotonic()
    tick = fault()
    time.sleep(FEED_AFTER_S)  # traffic goes on across the fault, whatever it takes
    done.until_back_under(lambda: dict(feed.sent_at), struck, tick)
    ids = feed.finish()
    done.wait(ids, RECOVER_S, tick)
    after = [i for i in ids if feed.sent_at[i] > struck]
    last_sent = max(feed.sent_at.values())
    back = done.back_under_s(feed.sent_at, struck, last_sent)
    return {
        "latency_p50_before_s": statistics.median(before),
        "recovered_s": min(done.first_seen[i] for i in after) - struck,
        "latency_max_after_s": max(done.first_seen[i] - feed.sent_at[i] for i in after),
        "p99_back_under_2s_s": math.inf if back is None else back,
    }


# Bounded by its waits; on a two-core machine shared with other work a driver's start alone
# took 120 s (docs/benchmarks.md), so more than the suite's 300 s.
@pytest.mark.timeout(1200)
def test_lost_executor_worker_and_driver_lose_nothing(
    kafka_bootstrap: str, spark_standalone: SparkStandalone, tmp_path: Path
) -> None:
    started = time.monotonic()
    topics = make_topics(kafka_bootstrap, partitions=2)
    for d in range(DEVICES):
        master(kafka_bootstrap, topics, f"dev-{d}")
    fleet = Fleet(DEVICES)
    warm = fleet.next("warm", 24)
    ingest(kafka_bootstrap, topics, warm)
    done = Completions(kafka_bootstrap, topics.completions)
    on_cluster = spark_standalone.driver_env()

    def driver(log: str, settings: dict[str, str]) -> object:
        return start_enricher(
            kafka_bootstrap, topics, tmp_path, log, on_cluster, max_seconds=900, **settings
        )

    first = driver("driver-1.log", SMALL_BATCHES)
    second = None
    try:
        done.wait({m.message_id for m in warm}, START_S, running(first))
        first_up = time.monotonic() - started
        spark_standalone.wait_executors(per_worker=1)

        killed: list[int] = []

        def kill_executor() -> Callable[[], None]:
            killed.append(spark_standalone.kill_executor(1))
            # A gateway resends what it was not sure about: the reloaded dedup state must
            # know these (sequences already seen) and complete them as duplicates.
            ingest(kafka_bootstrap, topics, warm[:6])
            return running(first)

        executor = fault_under_feed(kafka_bootstrap, topics, done, fleet, "exec", kill_executor)
        assert killed and killed[0] not in spark_standalone.executor_pids(1)

        def kill_worker() -> Callable[[], None]:
            # Worker 2's executor held a state partition: the other executor (or the
            # replacement's) must reload it from the checkpoint.
            spark_standalone.kill_worker(2)
            return running(first)

        worker = fault_under_feed(kafka_bootstrap, topics, done, fleet, "worker", kill_worker)

        def kill_driver() -> Callable[[], None]:
            nonlocal second
            os.killpg(first.pid, signal.SIGKILL)  # the driver's Python and its JVM
            first.wait(30)
            second = driver("driver-2.log", CLUSTER)  # the shipped cap and interval
            return running(second)

        driver_fault = fault_under_feed(kafka_bootstrap, topics, done, fleet, "driver", kill_driver)
        assert second is not None
        second.send_signal(signal.SIGTERM)  # graceful: stops the query, prints the summary
        second.communicate(timeout=120)
        assert second.returncode == 0
        found = done.terminal()
    finally:
        done.close()
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(30)

    resent = {m.message_id for m in warm[:6]}
    # Exactly one distinct terminal completion per message (a resent one: its enrichment
    # and the duplicate it was recognized as); copies of the same one are at-least-once.
    distinct = {i: set(found.get(i, [])) for i in (m.message_id for m in fleet.sent)}
    enriched = {i: {c for c in cs if c[0] == "OUTCOME_ENRICHED"} for i, cs in distinct.items()}
    assert {i for i, cs in enriched.items() if len(cs) != 1} == set()
    assert {i for i, cs in distinct.items() if len(cs - enriched[i]) != (i in resent)} == set()
    assert {c[0] for i in resent for c in distinct[i] - enriched[i]} == {"OUTCOME_DUPLICATE"}
    copies = sum(len(cs) for cs in found.values()) - sum(len(cs) for cs in distinct.values())
    # The keyed state moved between executors and came back with the driver: each device's
    # last snapshot counts its messages once, gap-free, up to the last sequence sent.
    last: dict[str, device_state_pb2.DeviceState] = {}
    for record in read_topic(kafka_bootstrap, topics.state, 60, require=True):
        last[record.key().decode()] = device_state_pb2.DeviceState.FromString(record.value())
    by_device: dict[str, list[Msg]] = {}
    for m in fleet.sent:
        by_device.setdefault(m.device_id, []).append(m)
    snapshots = {
        state.device_id: (state.message_count, state.last_sequence, state.gaps_detected)
        for state in last.values()
    }
    assert snapshots == {
        device: (len(msgs), msgs[-1].sequence, 0) for device, msgs in by_device.items()
    }
    print(
        f"\nexecutor faults: first completions {first_up:.1f}s after the driver started; "
        f"executor SIGKILL: {_figures(executor)}; worker and its executor SIGKILL: "
        f"{_figures(worker)}; driver SIGKILL + restart: "
        f"{_figures(driver_fault)}; {len(fleet.sent)} messages, {copies} completion copies "
        f"seen by the consumer, 0 lost (p99 back under 2 s: of {WINDOW_S:g} s windows of "
        f"send times, held {HOLD_S:g} s); test {time.monotonic() - started:.0f}s; "
        f"load {os.getloadavg()[0]:.1f}"
    )


def _figures(fig: dict[str, float]) -> str:
    return ", ".join(
        f"{k} {v:.1f}" if math.isfinite(v) else f"{k} not within {OBSERVE_S:g}"
        for k, v in fig.items()
    )
