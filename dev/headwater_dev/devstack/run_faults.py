"""The faults ``make run ARGS="--brokers 3 --chaos [leader|roll]"`` provokes mid-run.

- ``leader`` (plain ``--chaos``): halfway through the traffic, the node leading the
  telemetry topic's partition 0 is SIGKILLed; once another node leads it, the lost node is
  started again and the run waits until every replica is back in sync.
- ``roll``: 10 s after the latency warm-up (the p99 before it, for comparison), a rolling
  restart of every node, as an upgrade does (``BrokerCluster.roll``: SIGTERM, started
  again, the next once every replica is in sync), while the whole pipeline, the enricher
  included, goes on.

The summary then shows the fault beside the guarantees, which must all still PASS, and when
the end-to-end p99 was back under 2 s after it. A part of the dev stack's run
(``stack.py``), not of ``headwater chaos``, which acts on a running stack from outside
(``headwater_dev.chaos``).
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from headwater.topics import INGEST_TOPICS

if TYPE_CHECKING:  # the command line reads FAULTS without loading the Kafka client
    from headwater_dev.devstack.cluster import BrokerCluster
    from headwater_dev.devstack.progress import ProgressLine

#: The faults ``--chaos`` takes; the first is plain ``--chaos``'s.
FAULTS = ("leader", "roll")
#: Seconds of traffic of a run with a roll unless told otherwise: the roll starts 10 s after
#: the 20 s warm-up and takes 50-90 s on two cores (each node's restart and catching up), and
#: the p99 must then be seen back under 2 s for 15 s.
ROLL_DURATION_S = 150.0
#: Seconds of measured traffic before a roll: the p99 before the fault, to compare with.
ROLL_AFTER_WARMUP_S = 10.0
#: Seconds to wait for a new leader: the broker session (9 s) and the election, with room.
ELECTION_TIMEOUT_S = 60.0


def fault_start_s(fault: str, duration_s: float, warmup_s: float) -> float:
    """Seconds into the traffic at which ``fault`` strikes.

    A leader kill halfway; a roll, which takes a minute or more, soon after the warm-up, so
    that the traffic outlasts it.
    """
    return duration_s / 2 if fault == "leader" else warmup_s + ROLL_AFTER_WARMUP_S


async def provoke(
    fault: str, cluster: BrokerCluster, after_s: float, display: ProgressLine
) -> dict[str, Any]:
    """After ``after_s``, provoke ``fault`` (one of :data:`FAULTS`); return what happened."""
    await asyncio.sleep(after_s)
    if fault == "leader":
        return await _kill_a_leader(cluster, display)
    return await _roll(cluster, display)


async def _kill_a_leader(cluster: BrokerCluster, display: ProgressLine) -> dict[str, Any]:
    topic = INGEST_TOPICS["telemetry"]
    node = await asyncio.to_thread(cluster.leader_of, topic)
    at_ms, killed_at = time.time() * 1000, time.monotonic()
    await asyncio.to_thread(node.kill)
    display.message(f"chaos: SIGKILLed Kafka node {node.node_id}, the leader of {topic}[0]")
    successor = await asyncio.to_thread(cluster.leader_of, topic, 0, ELECTION_TIMEOUT_S, node)
    elected_s = time.monotonic() - killed_at
    display.message(
        f"chaos: node {successor.node_id} leads {topic}[0] after {elected_s:.1f}s; "
        f"starting node {node.node_id} again"
    )
    await asyncio.to_thread(cluster.restart, node)
    in_sync_s = time.monotonic() - killed_at
    display.message(f"chaos: every replica in sync again {in_sync_s:.1f}s after the kill")
    return {
        "kind": "leader",
        "at_ms": round(at_ms),
        "killed_node": node.node_id,
        "leader_of": f"{topic}[0]",
        "new_leader_after_s": round(elected_s, 1),
        "in_sync_again_after_s": round(in_sync_s, 1),
    }


async def _roll(cluster: BrokerCluster, display: ProgressLine) -> dict[str, Any]:
    at_ms, started = time.time() * 1000, time.monotonic()
    display.message("chaos: rolling restart of every Kafka node, one after another (SIGTERM)")
    took = await asyncio.to_thread(cluster.roll)
    display.message(
        "chaos: every node restarted, in sync again after " + ", ".join(f"{s:.1f}s" for s in took)
    )
    return {
        "kind": "roll",
        "at_ms": round(at_ms),
        "rolled_nodes": [node.node_id for node in cluster.nodes],
        "per_node_s": [round(s, 1) for s in took],
        "in_sync_again_after_s": round(time.monotonic() - started, 1),
    }
