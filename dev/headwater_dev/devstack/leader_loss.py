"""The fault ``make run ARGS="--brokers 3 --chaos"`` provokes: a leader lost mid-run.

Halfway through the traffic, the node leading the telemetry topic's partition 0 is
SIGKILLed; once another node leads it, the lost node is started again and the run waits
until every replica is back in sync. The summary then shows the fault beside the
guarantees, which must all still PASS. A part of the dev stack's run (``stack.py``), not of
``headwater chaos``, which acts on a running stack from outside (``headwater_dev.chaos``).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from headwater.topics import INGEST_TOPICS
from headwater_dev.devstack.cluster import BrokerCluster
from headwater_dev.devstack.progress import ProgressLine

#: Seconds to wait for a new leader: the broker session (9 s) and the election, with room.
ELECTION_TIMEOUT_S = 60.0


async def kill_a_leader(
    cluster: BrokerCluster, after_s: float, display: ProgressLine
) -> dict[str, Any]:
    """After ``after_s``, SIGKILL the leader of the telemetry topic; return what happened."""
    await asyncio.sleep(after_s)
    topic = INGEST_TOPICS["telemetry"]
    node = await asyncio.to_thread(cluster.leader_of, topic)
    killed_at = time.monotonic()
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
        "killed_node": node.node_id,
        "leader_of": f"{topic}[0]",
        "new_leader_after_s": round(elected_s, 1),
        "in_sync_again_after_s": round(in_sync_s, 1),
    }
