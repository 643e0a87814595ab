"""Phase 2: a rolling restart of every node under the steady load, as an upgrade does it.

After ``steady_s`` of load, each node in turn is stopped with SIGTERM (controlled shutdown:
its leaderships move first), started again, and the next only once every replica is back
in sync (:meth:`BrokerCluster.roll`, the fault test's roll too). Then, once the spool holds
no more than a second of load again, the same length of time without faults (at most
``seconds``): goodput over the roll against goodput over that calm window, in the same run
on the same machine.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from headwater_dev.bench.faults.isr import IsrWatch
from headwater_dev.bench.faults.load import SteadyLoad
from headwater_dev.bench.faults.options import FaultsOptions
from headwater_dev.bench.faults.phase import load_figures, loaded
from headwater_dev.devstack.cluster import BrokerCluster


def _caught_up(load: SteadyLoad, rate: float, within_s: float) -> float:
    """Wait until the spool holds at most a second of load; return the seconds waited."""
    started = time.monotonic()
    while load.depth > rate and time.monotonic() - started < within_s:
        time.sleep(0.2)
    return time.monotonic() - started


def run(
    cluster: BrokerCluster, target: str, opts: FaultsOptions, folder: Path, isr: IsrWatch
) -> tuple[dict[str, Any], dict[int, str]]:
    """Roll every node under load; return the figures and the OKs to read back."""
    with loaded(target, opts, folder) as load:
        time.sleep(opts.steady_s)
        roll_from = time.monotonic()
        took = cluster.roll()
        roll_to = time.monotonic()
        caught_up_s = _caught_up(load, opts.rate, opts.seconds)
        calm_from = time.monotonic()
        time.sleep(min(roll_to - roll_from, opts.seconds))
        calm_to = time.monotonic()
    ledger = load.ledger
    rolling, calm = ledger.goodput(roll_from, roll_to), ledger.goodput(calm_from, calm_to)
    figures = {
        "nodes": [node.node_id for node in cluster.nodes],
        "node_s": [round(t, 1) for t in took],
        "roll_s": round(roll_to - roll_from, 1),
        "goodput_roll_per_s": round(rolling),
        "calm_s": round(calm_to - calm_from, 1),
        "goodput_calm_per_s": round(calm),
        "goodput_ratio": round(rolling / calm, 3) if calm else None,
        "caught_up_after_roll_s": round(caught_up_s, 1),
        **load_figures(load, isr),
    }
    return figures, ledger.acked
