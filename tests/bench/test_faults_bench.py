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
import signal
import subprocess
import sys
import time

import pytest

from tests.support.process_guard import command_line, descendants, processes

pytestmark = pytest.mark.cluster

RATE, STEADY_S, SECONDS = 100, 2, 40
BENCH = [sys.executable, "-m", "headwater.cli", "bench", "faults"]


@pytest.mark.timeout(900)  # 110 s on the 2 shared cores at load 4; three JVM restarts in it
def test_faults_bench_reports_consistent_figures_and_loses_nothing() -> None:
    result = subprocess.run(
        [
            *BENCH, "--rate", str(RATE), "--steady-seconds", str(STEADY_S),
            "--seconds", str(SECONDS), "--json",
        ],
        capture_output=True,
        text=True,
        timeout=840,
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
    back = report["readback"]
    assert back["records"] == kill["oks"] + roll["oks"] + back["not_named_by_an_ok"]
    assert back["not_named_by_an_ok"] >= 0

    assert 0 < kill["election_s"] <= SECONDS
    assert set(kill["partitions"]) <= {0, 1, 2} and kill["partitions"], kill
    assert 1 <= kill["killed_node"] <= 3
    first, silent = kill["first_ok_after_kill_s"], kill["no_ok_s"]
    assert first is not None and silent > 0 and 0 < first <= SECONDS, kill
    others = sorted({0, 1, 2} - set(kill["partitions"]))
    assert kill["other_partitions"] == others, kill
    assert (kill["other_no_ok_s"] is None) == (not others), kill
    assert not others or 0 < kill["other_no_ok_s"] <= SECONDS + 10, kill

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


def _started(bench: subprocess.Popen[str], within_s: float) -> set[int]:
    """Wait until the bench runs three Kafka nodes and the ingest server; its processes."""
    deadline = time.monotonic() + within_s
    while True:
        mine = descendants(bench.pid, processes())
        lines = [command_line(pid) for pid in mine]
        nodes = sum(" kafka.Kafka " in line for line in lines)
        if nodes == 3 and any("headwater_dev.bench.server_proc" in line for line in lines):
            return mine
        assert bench.poll() is None, bench.communicate()[1][-3000:]
        assert time.monotonic() < deadline, f"not started within {within_s}s: {lines}"
        time.sleep(0.5)


@pytest.mark.timeout(300)
def test_sigterm_mid_run_stops_everything_it_started() -> None:
    bench = subprocess.Popen(
        [*BENCH, "--rate", str(RATE), "--steady-seconds", "60"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        started = _started(bench, within_s=120)
        time.sleep(3)  # into the load
        bench.send_signal(signal.SIGTERM)
        _, err = bench.communicate(timeout=120)
    finally:
        if bench.poll() is None:
            bench.kill()
    assert bench.returncode == 130, err[-3000:]
    assert "headwater bench faults: stopped" in err, err[-3000:]
    # The nodes were started in sessions of their own (a Ctrl-C meant for the caller must
    # not reach them): the bench stopped them itself, before it exited.
    table = processes()
    alive = {pid for pid in started if pid in table and table[pid].state != "Z"}
    assert not alive, [command_line(pid) for pid in alive]
