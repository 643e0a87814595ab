"""Issue 36's targets against one run's figures (met, MISSED or info), and the run as text.

Every verdict is computed here from the figures in the report, so the printed table and
the JSON agree. The load's own rows say whether the machine offered and carried ``--rate``
at all: if not, the fault figures were measured at a lower rate, and the text says so.
"""

from __future__ import annotations

from typing import Any

from headwater_dev.bench.cli import render
from headwater_dev.bench.report import machine_line

#: Issue 36: no OK for at most the election time + this, and a first OK within 15 s.
SILENCE_OVER_ELECTION_S = 2.0
FIRST_OK_WITHIN_S = 15.0
#: Issue 36: goodput over the roll against the same time without faults.
ROLL_GOODPUT = 0.80
#: The share of ``--rate`` a phase must offer and carry for the run to be "at the rate".
AT_RATE = 0.95


def _verdict(met: bool | None) -> str:
    return "info" if met is None else ("met" if met else "MISSED")


def targets(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Each target's row: {target, value, verdict}."""
    rate = report["options"]["rate"]
    kill, roll = report["leader_kill"], report["rolling_restart"]
    contract = report["contract"]
    rows: list[dict[str, Any]] = []

    def add(target: str, value: str, met: bool | None) -> None:
        rows.append({"target": target, "value": value, "verdict": _verdict(met)})

    offered = min(kill["offered_per_s"], roll["offered_per_s"])
    add(
        f"load offered >= {AT_RATE:.0%} of {rate:,.0f} msg/s",
        f"{offered:,} msg/s",
        offered >= AT_RATE * rate,
    )
    carried = roll["goodput_calm_per_s"]
    add(
        f"load carried without faults >= {AT_RATE:.0%} of {rate:,.0f} msg/s",
        f"{carried:,} msg/s",
        carried >= AT_RATE * rate,
    )
    for name, phase in (("leader kill", kill), ("rolling restart", roll)):
        lost = phase["lost"] + phase["altered"]
        add(
            f"{name}: acknowledged messages lost or altered in Kafka = 0",
            f"{lost:,} of {phase['oks']:,} OKs",
            lost == 0,
        )
        add(
            f"{name}: OKs without two in-sync copies = 0",
            f"{phase['oks_under_min_isr']:,} (acks={contract['acks']}, "
            f"min.insync.replicas={contract['min_insync_replicas']}; fewest in sync sampled: "
            f"{phase['fewest_in_sync']})",
            phase["oks_under_min_isr"] == 0 and contract["holds"],
        )
    election = kill["election_s"]
    add("leader kill: election (kill -> new leader in the metadata)", _s(election), None)
    add(
        f"leader kill: no OK on its partitions <= election + {SILENCE_OVER_ELECTION_S:g} s",
        f"{kill['no_ok_s']:.1f} s"
        + ("" if election is None else f" (<= {election + SILENCE_OVER_ELECTION_S:.1f} s)"),
        election is not None and kill["no_ok_s"] <= election + SILENCE_OVER_ELECTION_S,
    )
    first = kill["first_ok_after_kill_s"]
    add(
        f"leader kill: first OK on its partitions <= {FIRST_OK_WITHIN_S:g} s after the kill",
        _s(first),
        first is not None and first <= FIRST_OK_WITHIN_S,
    )
    ratio = roll["goodput_ratio"]
    add(
        f"rolling restart: goodput over the roll >= {ROLL_GOODPUT:.0%} of as long without faults",
        "-"
        if ratio is None
        else f"{ratio:.0%} ({roll['goodput_roll_per_s']:,} vs "
        f"{roll['goodput_calm_per_s']:,} msg/s)",
        ratio is not None and ratio >= ROLL_GOODPUT,
    )
    return rows


def _s(seconds: float | None) -> str:
    return "none within the bound" if seconds is None else f"{seconds:.1f} s"


def print_report(report: dict[str, Any]) -> None:
    """Print the run: the machine, the load, each phase, the targets."""
    opts, kill, roll = report["options"], report["leader_kill"], report["rolling_restart"]
    print(machine_line(report))
    print(
        f"load: {opts['rate']:,.0f} msg/s asked, {opts['payload']} B payloads from 100 devices, "
        "spooled through the gateway library (one durable spool, synchronous=FULL; the "
        "library's defaults: one stream, frames of 100, window 4)"
    )
    rows = [r for r in report["targets"] if r["target"].startswith("load ")]
    if any(r["verdict"] == "MISSED" for r in rows):
        print(
            f"  this machine ({report['machine_at_start']['nproc']} CPUs, 3 brokers, the ingest "
            f"server and the gateway on it) did not offer and carry {opts['rate']:,.0f} msg/s: "
            f"offered {min(kill['offered_per_s'], roll['offered_per_s']):,}, carried "
            f"{roll['goodput_calm_per_s']:,} without faults (measured): the figures below are at "
            "that rate"
        )
    print()
    print(
        f"leader kill: node {kill['killed_node']} (leading {kill['topic']} partitions "
        f"{kill['partitions']}) SIGKILLed after {opts['steady_s']:g} s at "
        f"{kill['goodput_before_per_s']:,} OKs/s; new leader after {_s(kill['election_s'])}; "
        f"no OK on those partitions for {kill['no_ok_s']:.1f} s (on the others "
        f"{_s(kill['other_no_ok_s'])}); first OK "
        f"{_s(kill['first_ok_after_kill_s'])} after the kill; node back and in sync "
        f"{kill['in_sync_again_s']:.1f} s after the phase"
    )
    _print_load(kill)
    print(
        f"rolling restart: nodes {roll['nodes']} each SIGTERMed and started again, the next "
        f"once in sync: {', '.join(f'{t:.1f} s' for t in roll['node_s'])} ({roll['roll_s']:.1f} "
        f"s); goodput {roll['goodput_roll_per_s']:,} msg/s over the roll vs "
        f"{roll['goodput_calm_per_s']:,} over {roll['calm_s']:.1f} s without faults (spool "
        f"caught up {roll['caught_up_after_roll_s']:.1f} s after the roll)"
    )
    _print_load(roll)
    back = report["readback"]
    print(
        f"read back: {back['records']:,} records in {back['seconds']:.1f} s, every OK looked up "
        f"at its partition and offset; {back['not_named_by_an_ok']:,} records no OK names "
        "(sent again after an answer that never came: Kafka is at least once)"
    )
    print()
    print(
        render(
            report["targets"], [("target", "target"), ("value", "value"), ("verdict", "verdict")]
        )
    )


def _print_load(phase: dict[str, Any]) -> None:
    print(
        f"  spooled {phase['spooled']:,} at {phase['offered_per_s']:,} msg/s; {phase['oks']:,} OKs "
        f"({phase['lost']:,} lost, {phase['altered']:,} altered in Kafka); retried "
        f"{phase['retried'] or 'none'}; rejected {phase['rejected'] or 'none'}; spool at most "
        f"{phase['max_spool_depth']:,} deep, {'drained' if phase['drained'] else 'NOT drained'}"
    )
