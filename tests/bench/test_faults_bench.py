"""``headwater bench faults`` end to end at a tiny rate: its own three-node cluster, both
faults, every OK read back, and figures that agree with each other and with the text.

Marker ``cluster`` (it starts three brokers and restarts each); bounded (the command's
``--seconds``, and a timeout). Only the guarantees are asserted as met (nothing acknowledged
lost, no OK without two in-sync copies): timings depend on the machine's load, so their
verdicts are checked against their own figures, not required to pass.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.cluster

RATE, STEADY_S, SECONDS = 100, 2, 40


def test_faults_bench_reports_consistent_figures_and_loses_nothing() -> None:
    result = subprocess.run(
        [
            sys.executable, "-m", "headwater.cli", "bench", "faults", "--rate", str(RATE),
            "--steady-seconds", str(STEADY_S), "--seconds", str(SECONDS), "--json",
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    text = result.stdout
    kill, roll = report["leader_kill"], report["rolling_restart"]

    assert report["contract"] == {
        "acks": "all",
        "replicas": 3,
        "min_insync_replicas": 2,
        "holds": True,
    }
    for phase in (kill, roll):
        # The load: offered at the rate asked, all of it spooled, answered OK and drained.
        assert 0.9 * RATE <= phase["offered_per_s"] <= 1.1 * RATE, phase
        assert phase["drained"] and not phase["rejected"], phase
        assert phase["oks"] >= phase["spooled"] > 0, phase
        assert phase["lost"] == phase["altered"] == 0, phase
        assert phase["oks_under_min_isr"] == 0 and phase["fewest_in_sync"] >= 2, phase
    # Every OK named its own partition and offset, and each was found there.
    assert report["readback"]["records"] >= kill["oks"] + roll["oks"]

    assert 0 < kill["election_s"] <= SECONDS
    assert set(kill["partitions"]) <= {0, 1, 2} and kill["partitions"], kill
    assert 1 <= kill["killed_node"] <= 3
    first, silent = kill["first_ok_after_kill_s"], kill["no_ok_s"]
    assert first is not None and silent > 0 and 0 < first <= SECONDS, kill

    assert roll["nodes"] == [1, 2, 3] and len(roll["node_s"]) == 3
    assert sum(roll["node_s"]) <= roll["roll_s"] + 0.5
    assert roll["calm_s"] == pytest.approx(min(roll["roll_s"], SECONDS), abs=1.5)
    ratio = roll["goodput_roll_per_s"] / roll["goodput_calm_per_s"]
    assert roll["goodput_ratio"] == pytest.approx(ratio, abs=0.02)

    # Each verdict follows from its figures, and the text prints the same table.
    verdicts = {row["target"]: row["verdict"] for row in report["targets"]}
    assert len(verdicts) == 2 + 2 * 2 + 3 + 1

    def verdict(target: str) -> str:
        return next(v for t, v in verdicts.items() if t.startswith(target))

    assert verdict("leader kill: acknowledged") == verdict("rolling restart: acknowledged") == "met"
    assert verdict("leader kill: OKs without") == verdict("rolling restart: OKs without") == "met"
    assert verdict("leader kill: election") == "info"
    expected = {
        "leader kill: no OK": silent <= kill["election_s"] + 2,
        "leader kill: first OK": first <= 15,
        "rolling restart: goodput": roll["goodput_ratio"] >= 0.8,
        "load offered": min(kill["offered_per_s"], roll["offered_per_s"]) >= 0.95 * RATE,
        "load carried": roll["goodput_calm_per_s"] >= 0.95 * RATE,
    }
    for target, met in expected.items():
        assert verdict(target) == ("met" if met else "MISSED"), target
    printed = re.findall(r"^(.+?)\s{2,}.*\s(met|MISSED|info)\s*$", text, re.M)
    assert {t.strip(): v for t, v in printed} == verdicts, text
    loads = re.search(r"load average \[(.+?)\] at start, \[(.+?)\] at end", text)
    assert loads is not None, text
