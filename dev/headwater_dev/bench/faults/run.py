"""One run of ``headwater bench faults``: the cluster, ingest, the two phases, the read-back."""

from __future__ import annotations

import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from headwater_dev.bench import server_proc
from headwater_dev.bench.faults import leader_kill, rolling
from headwater_dev.bench.faults.isr import IsrWatch, write_contract
from headwater_dev.bench.faults.options import FaultsOptions
from headwater_dev.bench.faults.readback import confirm
from headwater_dev.bench.faults.report import targets
from headwater_dev.bench.report import machine
from headwater_dev.devstack.cluster import CLUSTER_SIZE, BrokerCluster

TOPIC = leader_kill.TOPIC


def run_faults_benchmark(opts: FaultsOptions) -> dict[str, Any]:
    """Start everything, run both phases, read every OK back, stop everything; the report."""
    report: dict[str, Any] = {"machine_at_start": machine(), "options": asdict(opts)}
    started = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="headwater-faults-") as tmp,
        BrokerCluster(CLUSTER_SIZE) as cluster,
        server_proc.serving(cluster.bootstrap_servers, replicas=CLUSTER_SIZE) as (target, _),
        IsrWatch(cluster.bootstrap_servers, TOPIC) as isr,
    ):
        report["broker"] = (
            f"{CLUSTER_SIZE} KRaft nodes on loopback (with ingest: ready in "
            f"{time.monotonic() - started:.1f} s)"
        )
        report["contract"] = write_contract(cluster.bootstrap_servers, TOPIC)
        folder = Path(tmp)
        kill, kill_oks = leader_kill.run(cluster, target, opts, folder / "kill", isr)
        roll, roll_oks = rolling.run(cluster, target, opts, folder / "roll", isr)
        read_from = time.monotonic()
        found = confirm(
            cluster.bootstrap_servers, TOPIC, {"leader_kill": kill_oks, "rolling_restart": roll_oks}
        )
        oks = kill["oks"] + roll["oks"]
        report["readback"] = {
            "records": found["records"],
            # Written twice: sent again after an answer that never came (at least once).
            "not_named_by_an_ok": found["records"] - oks,
            "seconds": round(time.monotonic() - read_from, 1),
        }
        report["leader_kill"] = kill | found["leader_kill"]
        report["rolling_restart"] = roll | found["rolling_restart"]
    report["targets"] = targets(report)
    report["seconds"] = round(time.monotonic() - started)
    report["machine_at_end"] = machine()
    return report
