"""How we know no OK left fewer than two in-sync copies: the write contract, and a watch.

An OK means the ingest writer's producer had its ack, and it asks ``acks=all``: the leader
acks only once every replica in the in-sync set has the record, and refuses the write
(``NOT_ENOUGH_REPLICAS``) while that set is smaller than the topic's
``min.insync.replicas``. :func:`write_contract` reads both from where they are decided (the
producer configuration the writer uses, and the topic's configuration as the brokers
describe it). :class:`IsrWatch` then samples each partition's in-sync set from the cluster's
metadata while the load runs, and :func:`oks_under_min_isr` counts OKs that arrived while
their partition's last sample had fewer than two: a check on the contract, not a proof
(metadata lags: a node just killed stays in the set until the controller fences it).
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource

from headwater.kafka.settings import KafkaSettings
from headwater_dev.bench.faults.ledger import OkLedger

#: Seconds between two samples of the in-sync sets.
SAMPLE_EVERY_S = 0.5
#: The copies an OK must have: production's ``min.insync.replicas``.
MIN_COPIES = 2


def write_contract(bootstrap: str, topic: str) -> dict[str, Any]:
    """The producer's ``acks``, the topic's replicas and ``min.insync.replicas`` as configured."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    (future,) = admin.describe_configs([ConfigResource("topic", topic)]).values()
    min_isr = int(future.result(timeout=15)["min.insync.replicas"].value)
    partitions = admin.list_topics(topic, timeout=15).topics[topic].partitions
    # The producer configuration the ingest writer builds on (services/ingest/writers).
    acks = KafkaSettings(bootstrap_servers=bootstrap).producer_config("headwater-ingest")["acks"]
    return {
        "acks": acks,
        "replicas": min(len(p.replicas) for p in partitions.values()),
        "min_insync_replicas": min_isr,
        "holds": acks == "all" and min_isr >= MIN_COPIES,
    }


class IsrWatch:
    """Sample the in-sync set of each of ``topic``'s partitions until stopped (a thread)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self._admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
        self._topic = topic
        #: Per partition: (when, in-sync set size), in time order.
        self.samples: dict[int, list[tuple[float, int]]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="faults-isr", daemon=True)

    def __enter__(self) -> IsrWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(15)

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(KafkaException):
                meta = self._admin.list_topics(self._topic, timeout=5).topics[self._topic]
                now = time.monotonic()
                for p in meta.partitions.values():
                    self.samples.setdefault(p.id, []).append((now, len(p.isrs)))
            self._stop.wait(SAMPLE_EVERY_S)

    def fewest(self, start: float, end: float) -> int | None:
        """The smallest in-sync set sampled between ``start`` and ``end``; None: no sample."""
        seen = [
            size
            for samples in list(self.samples.values())
            for t, size in list(samples)
            if start <= t <= end
        ]
        return min(seen) if seen else None

    def oks_under_min_isr(self, ledger: OkLedger) -> int:
        """OKs that arrived while their partition's last sample had under two in sync."""
        samples = {p: list(s) for p, s in list(self.samples.items())}
        last = dict.fromkeys(samples, -1)  # per partition: the last sample before the OK
        under = 0
        n = len(ledger.ok_at)
        for t, p in zip(ledger.ok_at[:n], ledger.ok_partition[:n], strict=True):
            own = samples.get(p, [])
            i = last.get(p, -1)
            while i + 1 < len(own) and own[i + 1][0] <= t:
                i += 1
            last[p] = i
            if i >= 0 and own[i][1] < MIN_COPIES:
                under += 1
        return under
