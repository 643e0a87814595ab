"""The dev stack's closing summary: what the fleet saw, what Kafka holds, what was enriched."""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from headwater.proto.events.v1 import completion_pb2, dead_letter_pb2
from headwater.runtime.stats import percentile
from headwater.topics import (
    COMPLETIONS_TOPIC,
    DEADLETTER_TOPIC,
    DEVICE_STATE_TOPIC,
    EVENT_TOPICS,
    RETRY_TOPIC,
)
from headwater_dev.devstack.fleet import FleetStats
from headwater_dev.devstack.p99_window import seconds_back_under
from headwater_dev.devstack.readback import IngestReadback, read_topic

#: The outcomes that end a message (RETRY_SCHEDULED parks it; DUPLICATE answers a resend).
_FINAL = (completion_pb2.OUTCOME_ENRICHED, completion_pb2.OUTCOME_DEAD_LETTERED)


@dataclass
class EnrichedOutput:
    """What the enricher wrote, read back from its topics."""

    events: int = 0
    completions: Counter[str] = field(default_factory=Counter)
    terminal_message_ids: set[str] = field(default_factory=set)
    #: Messages with two different final outcomes (:func:`two_outcomes`).
    two_outcomes: int = 0
    dead_letters: Counter[str] = field(default_factory=Counter)
    retries: int = 0
    state_snapshots: int = 0
    #: ENRICHED completions per device id.
    enriched_per_device: Counter[str] = field(default_factory=Counter)
    #: Ingest receipt -> ENRICHED completion, of messages received after the warm-up: those
    #: enriched at once, and those parked first (their device's master data came late).
    end_to_end_ms: list[float] = field(default_factory=list)
    parked_end_to_end_ms: list[float] = field(default_factory=list)
    #: When ingest received each message of ``end_to_end_ms`` (ms since the epoch).
    end_to_end_received_ms: list[int] = field(default_factory=list)


def read_enriched(
    bootstrap: str, received_at_ms: dict[str, int], measured_from_ms: int = 0
) -> EnrichedOutput:
    """Read the enricher's topics; end-to-end latency is ingest receipt -> completion.

    Latency is that of messages received at or after ``measured_from_ms`` (the warm-up's
    end), split by :func:`end_to_end`.
    """
    out = EnrichedOutput()
    for topic in EVENT_TOPICS.values():
        out.events += sum(1 for _ in read_topic(bootstrap, topic))
    completions = [
        (completion_pb2.Completion.FromString(msg.value() or b""), msg.timestamp()[1])
        for msg in read_topic(bootstrap, COMPLETIONS_TOPIC)
    ]
    for completion, _ in completions:
        out.completions[
            completion_pb2.Outcome.Name(completion.outcome).removeprefix("OUTCOME_")
        ] += 1
        if completion.outcome != completion_pb2.OUTCOME_RETRY_SCHEDULED:
            out.terminal_message_ids.add(completion.message_id)
        if completion.outcome == completion_pb2.OUTCOME_ENRICHED:
            out.enriched_per_device[completion.device_id] += 1
    out.two_outcomes = two_outcomes([c for c, _ in completions])
    direct, out.parked_end_to_end_ms = end_to_end(completions, received_at_ms, measured_from_ms)
    out.end_to_end_received_ms = [received for received, _ in direct]
    out.end_to_end_ms = [latency for _, latency in direct]
    for msg in read_topic(bootstrap, DEADLETTER_TOPIC):
        out.dead_letters[dead_letter_pb2.DeadLetter.FromString(msg.value() or b"").reason] += 1
    out.retries = sum(1 for _ in read_topic(bootstrap, RETRY_TOPIC))
    out.state_snapshots = sum(1 for _ in read_topic(bootstrap, DEVICE_STATE_TOPIC))
    return out


def two_outcomes(completions: list[completion_pb2.Completion]) -> int:
    """Return how many messages have two different final outcomes.

    Final: ENRICHED (with its event ids) or DEAD_LETTERED. A copy of the same completion is
    at-least-once and harmless; a DUPLICATE answers a resend, not the message's outcome.
    """
    final: dict[str, set[tuple[int, tuple[str, ...]]]] = {}
    for c in completions:
        if c.outcome in _FINAL:
            events = tuple(e.event_id for e in c.events)
            final.setdefault(c.message_id, set()).add((c.outcome, events))
    return sum(1 for outcomes in final.values() if len(outcomes) > 1)


def end_to_end(
    completions: list[tuple[completion_pb2.Completion, int]],
    received_at_ms: dict[str, int],
    measured_from_ms: int,
) -> tuple[list[tuple[int, float]], list[float]]:
    """Return ingest receipt -> ENRICHED completion (ms): (not parked, parked first).

    Those not parked come with their receipt, in the order of it: (received, latency).

    ``completions`` are (completion, the time Kafka stamped it). Only messages received at
    or after ``measured_from_ms`` count. A message parked (a RETRY_SCHEDULED completion
    before its ENRICHED one: its device's master data came late) is apart: its latency is
    the wait for master data and the retry's back-off, not the pipeline's.
    """
    parked = {
        c.message_id for c, _ in completions if c.outcome == completion_pb2.OUTCOME_RETRY_SCHEDULED
    }
    direct: list[tuple[int, float]] = []
    retried: list[float] = []
    for c, written_ms in completions:
        received = received_at_ms.get(c.message_id)
        if c.outcome != completion_pb2.OUTCOME_ENRICHED or not received:
            continue
        if received < measured_from_ms:
            continue
        if c.message_id in parked:
            retried.append(written_ms - received)
        else:
            direct.append((received, written_ms - received))
    return sorted(direct), retried


def p99_before_ms(enriched: EnrichedOutput, fault_ms: float) -> float | None:
    """The not-parked p99 (ms) of messages received after the warm-up and before the fault.

    What "back under 2 s" compares with; None when no message was received in between.
    """
    before = bisect.bisect_left(enriched.end_to_end_received_ms, fault_ms)
    if before == 0:
        return None
    return round(percentile(enriched.end_to_end_ms[:before], 99), 1)


def p99_back_under_s(enriched: EnrichedOutput, fault_ms: float) -> float | None:
    """Seconds from ``fault_ms`` until the not-parked p99 was back under 2 s for good.

    Over sliding windows of ingest receipt times, to the last message received
    (``headwater_dev.devstack.p99_window``); None when it was not back, or not held long
    enough before the traffic ended.
    """
    received = enriched.end_to_end_received_ms
    if not received:
        return None
    return seconds_back_under(received, enriched.end_to_end_ms, fault_ms, received[-1])


def build_summary(
    stats: FleetStats,
    readback: IngestReadback,
    missing: list[str],
    duration_s: float,
    enriched: EnrichedOutput | None,
    warmup_s: float = 0.0,
) -> dict[str, Any]:
    """Return the summary as a dict (printed as a table and as JSON).

    ``warmup_s``: the seconds of traffic at the start left out of the end-to-end latency
    (0: none, the latency is of every message).
    """
    latencies_ms = [s * 1000 for s in stats.call_latencies_s]
    summary: dict[str, Any] = {
        "duration_s": round(duration_s, 1),
        "sent": stats.sent,
        "acked": len(stats.acked),
        "rejected": dict(stats.rejected.most_common()),
        "retried": dict(stats.retried.most_common()),
        "still_spooled": {gw: n for gw, n in stats.still_spooled.items() if n},
        "duplicates_sent": stats.duplicates_sent,
        "poison_sent": stats.poison_sent,
        "throughput_msgs_per_s": round(len(stats.acked) / duration_s, 1) if duration_s else 0,
        "spool_to_ack_p50_ms": round(percentile(latencies_ms, 50), 2),
        "spool_to_ack_p99_ms": round(percentile(latencies_ms, 99), 2),
        "ingest_records_in_kafka": readback.records,
        "acked_but_missing_in_kafka": len(missing),
    }
    if enriched is not None:
        summary["enricher"] = {
            "events": enriched.events,
            "completions": dict(enriched.completions),
            "dead_letters": dict(enriched.dead_letters),
            "retries": enriched.retries,
            "state_snapshots": enriched.state_snapshots,
            "messages_without_terminal_completion": len(
                set(readback.found) - enriched.terminal_message_ids
            ),
            "messages_with_two_different_outcomes": enriched.two_outcomes,
            # Messages enriched without being parked, received after the warm-up.
            "end_to_end_p50_ms": round(percentile(enriched.end_to_end_ms, 50), 1),
            "end_to_end_p99_ms": round(percentile(enriched.end_to_end_ms, 99), 1),
            # Parked first (master data came late), then enriched by a retry.
            "parked_end_to_end_p50_ms": round(percentile(enriched.parked_end_to_end_ms, 50), 1),
            "parked_end_to_end_p99_ms": round(percentile(enriched.parked_end_to_end_ms, 99), 1),
            "latency_warmup_s": warmup_s,
        }
    return summary


@dataclass(frozen=True)
class Guarantee:
    """One promise the run checks: its name, the count that must be 0, and the verdict."""

    name: str
    count: int

    @property
    def ok(self) -> bool:
        """True when nothing broke the promise."""
        return self.count == 0


def guarantees(summary: dict[str, Any]) -> list[Guarantee]:
    """Return the promises a summary checks (the enricher's only when it ran)."""
    checks = [Guarantee("acked but missing in Kafka", summary["acked_but_missing_in_kafka"])]
    enricher = summary.get("enricher")
    if enricher is not None:
        checks.append(
            Guarantee(
                "messages without a terminal completion",
                enricher["messages_without_terminal_completion"],
            )
        )
        checks.append(
            Guarantee(
                "messages with two different outcomes",
                enricher["messages_with_two_different_outcomes"],
            )
        )
    return checks


def _counts(title: str, counter: dict[str, int]) -> list[tuple[str, str]]:
    """Rows for a count by reason: the total first, then one indented row per reason."""
    rows = [(title, str(sum(counter.values())))]
    rows += [(f"  - {reason}", str(n)) for reason, n in counter.items()]
    return rows


def _stage_rows(summary: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(stage, measure, value) rows; the stage is named on its first row only."""
    ingest: list[tuple[str, str]] = [
        ("sent", str(summary["sent"])),
        ("acked", str(summary["acked"])),
        ("throughput", f"{summary['throughput_msgs_per_s']} msg/s"),
        (
            "spool-to-ack latency p50 / p99",
            f"{summary['spool_to_ack_p50_ms']} / {summary['spool_to_ack_p99_ms']} ms",
        ),
    ]
    for title, key in (
        ("rejected", "rejected"),
        ("retried", "retried"),
        ("still spooled", "still_spooled"),
    ):
        ingest += _counts(title, summary[key])
    ingest += [
        ("duplicates sent (on purpose)", str(summary["duplicates_sent"])),
        ("poison sent (on purpose)", str(summary["poison_sent"])),
        ("records in the ingest topics", str(summary["ingest_records_in_kafka"])),
    ]
    stages = [("ingest", ingest)]
    enricher = summary.get("enricher")
    if enricher is not None:
        rows = [("events", str(enricher["events"]))]
        if "spark" in summary:
            rows.insert(0, ("Spark master", summary["spark"]["master"]))
        rows += _counts("completions", enricher["completions"])
        rows += _counts("dead letters", enricher["dead_letters"])
        rows += [
            ("retries", str(enricher["retries"])),
            ("device state snapshots", str(enricher["state_snapshots"])),
            *_latency_rows(enricher),
        ]
        stages.append(("enricher", rows))
    kafka = summary.get("kafka")
    if kafka is not None:
        rows = [("brokers", str(kafka["brokers"]))]
        fault = kafka.get("fault")
        if fault is not None:
            rows += _fault_rows(fault)
        stages.append(("kafka", rows))
    connectors = summary.get("connectors")
    if connectors is not None:
        stages.append(("connectors", _connector_rows(connectors)))
    commands = summary.get("commands")
    if commands is not None:
        rows = [("sent", str(commands["sent"]))]
        rows += _counts("refused", commands["refused"])
        rows += _counts("state now", commands["states"])
        stages.append(("commands", rows))
    return [
        (stage if i == 0 else "", measure, value)
        for stage, rows in stages
        for i, (measure, value) in enumerate(rows)
    ]


def _fault_rows(fault: dict[str, Any]) -> list[tuple[str, str]]:
    """The fault ``--chaos`` provoked, and when the end-to-end p99 was back after it."""
    if fault["kind"] == "roll":
        rows = [
            ("rolling restart (SIGTERM) of nodes", ", ".join(map(str, fault["rolled_nodes"]))),
            ("  - each in sync again after", " / ".join(f"{s} s" for s in fault["per_node_s"])),
        ]
    else:
        rows = [
            (f"leader of {fault['leader_of']} killed", f"node {fault['killed_node']}"),
            ("  - a new leader after", f"{fault['new_leader_after_s']} s"),
        ]
    rows.append(("  - every replica in sync again after", f"{fault['in_sync_again_after_s']} s"))
    if "p99_back_under_2s_s" in fault:  # the enricher ran
        before, back = fault["p99_before_ms"], fault["p99_back_under_2s_s"]
        rows += [
            (
                "  - end-to-end p99 (not parked) before it",
                "no message measured" if before is None else f"{before} ms",
            ),
            (
                "  - end-to-end p99 (not parked) back under 2 s after",
                "not within the run" if back is None else f"{back} s",
            ),
        ]
    return rows


def connector_summary(
    devices: dict[str, str],
    spooled: dict[str, int],
    left_out: dict[str, str],
    readback: IngestReadback,
    enriched: EnrichedOutput | None,
) -> dict[str, Any]:
    """Per connector (its device): values the gateway spooled, messages in Kafka, ENRICHED.

    ``enriched`` None: the enricher did not run. A connector ``left_out`` carries why.
    """
    out: dict[str, Any] = {}
    for name, device_id in devices.items():
        if name in left_out:
            out[name] = {"device_id": device_id, "left_out": left_out[name]}
            continue
        out[name] = {
            "device_id": device_id,
            "values_spooled": spooled.get(name, 0),
            "messages_in_kafka": readback.per_device[device_id],
            "enriched": None if enriched is None else enriched.enriched_per_device[device_id],
        }
    return out


def _connector_rows(connectors: dict[str, Any]) -> list[tuple[str, str]]:
    """One row per connector of the edge gateway: spooled / in Kafka / ENRICHED."""
    rows = []
    for name, c in connectors.items():
        if "left_out" in c:
            rows.append((f"{name} ({c['device_id']})", "left out (see the JSON summary)"))
            continue
        enriched = "-" if c["enriched"] is None else str(c["enriched"])
        rows.append(
            (
                f"{name} ({c['device_id']}): spooled / in Kafka / ENRICHED",
                f"{c['values_spooled']} / {c['messages_in_kafka']} / {enriched}",
            )
        )
    return rows


def _latency_rows(enricher: dict[str, Any]) -> list[tuple[str, str]]:
    """End-to-end latency: not parked, parked then retried, and the warm-up left out."""
    warmup_s = enricher["latency_warmup_s"]
    return [
        (
            "end-to-end latency p50 / p99, not parked",
            f"{enricher['end_to_end_p50_ms']} / {enricher['end_to_end_p99_ms']} ms",
        ),
        (
            "end-to-end latency p50 / p99, parked, then retried",
            f"{enricher['parked_end_to_end_p50_ms']} / {enricher['parked_end_to_end_p99_ms']} ms",
        ),
        (
            "  - warm-up left out (messages received in it)",
            f"{warmup_s:g} s" if warmup_s else "none: the run is too short",
        ),
    ]


def render(summary: dict[str, Any]) -> str:
    """Render the summary as a table grouped by stage, the guarantees marked PASS/FAIL."""
    checks = guarantees(summary)
    rows = [(*row, "") for row in _stage_rows(summary)]
    rows += [
        ("guarantees" if i == 0 else "", g.name, str(g.count), "PASS" if g.ok else "FAIL")
        for i, g in enumerate(checks)
    ]
    header = ("stage", "measure", "value", "check")
    width = [max(len(row[c]) for row in [header, *rows]) for c in range(4)]
    rule = "  ".join("-" * w for w in width)

    def line(row: tuple[str, ...]) -> str:
        stage, measure, value, check = row
        return (
            f"{stage:<{width[0]}}  {measure:<{width[1]}}  {value:>{width[2]}}  {check}"
        ).rstrip()

    out = ["", f"Headwater dev stack summary: {summary['duration_s']} s of traffic", ""]
    out += [line(header), rule]
    for n, row in enumerate(rows):
        if row[0] and n:  # a rule between stages
            out.append(rule)
        out.append(line(row))
    held = all(g.ok for g in checks)
    out += ["", "every guarantee held" if held else "a guarantee FAILED: see the rows marked FAIL"]
    return "\n".join(out)
