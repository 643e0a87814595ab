"""Phase 1: the node leading the ingest partition(s) SIGKILLed under the steady load.

After ``steady_s`` of load, the node leading ``ingest.telemetry.v1`` partition 0 (and
whichever other partitions of it) is killed, as a lost machine would be. Measured: the
election (kill -> a node that stays names another leader for each of those partitions in
its metadata, each node asked itself every 0.1 s), the longest stretch with no OK on those
partitions, and the first OK that ends it; the load then runs ``steady_s`` more and the
spool drains. Also measured: the longest stretch with no OK on the partitions it did
not lead (today one gateway stream's frames mix every partition's messages, so it waits for
the electing one too: docs/benchmarks.md). The node is started again afterwards and the
phase ends once every replica is back in sync, so the next phase starts whole.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from headwater.topics import INGEST_TOPICS
from headwater_dev.bench.faults.isr import IsrWatch
from headwater_dev.bench.faults.ledger import OkLedger, silence_around
from headwater_dev.bench.faults.options import FaultsOptions
from headwater_dev.bench.faults.phase import load_figures, loaded
from headwater_dev.devstack.broker import EmbeddedBroker
from headwater_dev.devstack.cluster import BrokerCluster

TOPIC = INGEST_TOPICS["telemetry"]
#: How often the phase looks for the first OK after the election.
LOOK_EVERY_S = 0.2


def _watchers(cluster: BrokerCluster, killed: EmbeddedBroker) -> list[AdminClient]:
    """One admin client per node that stays, connected before the kill.

    Each is asked itself: a client of the whole cluster may first wait out its request to
    the node just killed, which would add seconds to the election.
    """
    admins = [
        AdminClient({"bootstrap.servers": node.bootstrap_servers, "log_level": 0})
        for node in cluster.nodes
        if node is not killed
    ]
    for admin in admins:
        admin.list_topics(TOPIC, timeout=10)
    return admins


def _elected(
    watchers: list[AdminClient], partitions: list[int], killed: EmbeddedBroker, deadline: float
) -> float | None:
    """When a node's metadata first named another leader for each of ``partitions``.

    None: not by ``deadline``.
    """
    while time.monotonic() < deadline:
        for admin in watchers:
            with contextlib.suppress(KafkaException):
                meta = admin.list_topics(TOPIC, timeout=1).topics[TOPIC].partitions
                if all(meta[p].leader not in (-1, killed.node_id) for p in partitions):
                    return time.monotonic()
        time.sleep(LOOK_EVERY_S / 2)
    return None


def _first_ok(ledger: OkLedger, partitions: list[int], after: float, deadline: float) -> bool:
    """Wait for an OK on ``partitions`` later than ``after``; False: none by ``deadline``."""
    while ledger.first_ok_on(partitions, after) is None:
        if time.monotonic() > deadline:
            return False
        time.sleep(LOOK_EVERY_S)
    return True


def run(
    cluster: BrokerCluster, target: str, opts: FaultsOptions, folder: Path, isr: IsrWatch
) -> tuple[dict[str, Any], dict[int, str]]:
    """Kill the leader under load; return the figures and the OKs to read back."""
    with loaded(target, opts, folder) as load:
        time.sleep(opts.steady_s)
        leader = cluster.leader_of(TOPIC, 0)
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers, "log_level": 0})
        partitions = admin.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions
        led = [p for p in sorted(partitions) if cluster.leader_of(TOPIC, p) is leader]
        watchers = _watchers(cluster, leader)
        killed_at = time.monotonic()
        leader.kill()
        deadline = killed_at + opts.seconds
        elected_at = _elected(watchers, led, leader, deadline)
        recovered = elected_at is not None and _first_ok(load.ledger, led, elected_at, deadline)
        if recovered:
            time.sleep(opts.steady_s)
        ended_at = time.monotonic()
    ledger = load.ledger
    start, end = silence_around(ledger.times_on(led), killed_at, ended_at)
    healthy = [p for p in sorted(partitions) if p not in led]
    others_from, others_to = silence_around(ledger.times_on(healthy), killed_at, ended_at)
    back_at = time.monotonic()
    cluster.restart(leader)
    figures = {
        "killed_node": leader.node_id,
        "topic": TOPIC,
        "partitions": led,
        "election_s": None if elected_at is None else round(elected_at - killed_at, 1),
        "no_ok_s": round(end - start, 1),
        "first_ok_after_kill_s": round(end - killed_at, 1) if recovered else None,
        "other_partitions": healthy,
        "other_no_ok_s": round(others_to - others_from, 1) if healthy else None,
        "goodput_before_per_s": round(ledger.goodput(killed_at - opts.steady_s, killed_at)),
        "in_sync_again_s": round(time.monotonic() - back_at, 1),
        **load_figures(load, isr),
    }
    return figures, ledger.acked
