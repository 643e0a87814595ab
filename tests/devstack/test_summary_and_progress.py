"""The run's closing table and its progress line (pure units: no broker needed)."""

from __future__ import annotations

import io
from collections import Counter

from headwater.proto.events.v1 import completion_pb2
from headwater_dev.devstack.progress import ProgressLine
from headwater_dev.devstack.readback import IngestReadback
from headwater_dev.devstack.stack import DevStackOptions
from headwater_dev.devstack.summary import (
    EnrichedOutput,
    connector_summary,
    end_to_end,
    guarantees,
    p99_back_under_s,
    p99_before_ms,
    render,
    two_outcomes,
)

SUMMARY = {
    "duration_s": 60.0,
    "sent": 30000,
    "acked": 29500,
    "rejected": {"PAYLOAD_TOO_LARGE": 12, "INVALID_MESSAGE": 30},
    "retried": {"INVALID_TOKEN": 40},
    "still_spooled": {"gw-rogue": 300},
    "duplicates_sent": 100,
    "poison_sent": 20,
    "throughput_msgs_per_s": 491.7,
    "spool_to_ack_p50_ms": 2.1,
    "spool_to_ack_p99_ms": 12.5,
    "ingest_records_in_kafka": 29600,
    "acked_but_missing_in_kafka": 0,
    "enricher": {
        "events": 29000,
        "completions": {"ENRICHED": 29000, "DUPLICATE": 100},
        "dead_letters": {},
        "retries": 5,
        "state_snapshots": 29000,
        "messages_without_terminal_completion": 3,
        "messages_with_two_different_outcomes": 0,
        "end_to_end_p50_ms": 800.0,
        "end_to_end_p99_ms": 2100.5,
        "parked_end_to_end_p50_ms": 21000.0,
        "parked_end_to_end_p99_ms": 38000.0,
        "latency_warmup_s": 20.0,
    },
}


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def row(table: str, measure: str) -> list[str]:
    """The cells of the row naming ``measure`` (stage column first when it has one)."""
    (line,) = [ln for ln in table.splitlines() if f" {measure} " in f" {ln} "]
    return line.split()


def test_table_groups_rows_by_stage_and_marks_each_guarantee():
    table = render(SUMMARY)
    lines = table.splitlines()
    header = lines.index(next(ln for ln in lines if ln.startswith("stage")))
    rows = lines[header : lines.index("", header)]  # the table ends at the blank line
    stages = [ln.split()[0] for ln in rows if ln[:1].isalpha()]
    assert stages == ["stage", "ingest", "enricher", "guarantees"]
    assert row(table, "acked but missing in Kafka")[-2:] == ["0", "PASS"]
    assert row(table, "messages without a terminal completion")[-2:] == ["3", "FAIL"]
    assert "a guarantee FAILED" in table
    # Counts by reason: a total, then one indented row per reason.
    assert row(table, "rejected")[-1] == "42"
    assert row(table, "- PAYLOAD_TOO_LARGE")[-1] == "12"
    assert row(table, "- ENRICHED")[-1] == "29000"
    # Columns line up: every value ends in the same column.
    ends = {len(ln.rstrip()) for ln in rows if ln.split()[-1].isdigit()}
    assert len(ends) == 1, ends


def test_without_the_enricher_one_guarantee_is_checked():
    ingest_only = {k: v for k, v in SUMMARY.items() if k != "enricher"}
    assert [g.name for g in guarantees(ingest_only)] == ["acked but missing in Kafka"]
    table = render(ingest_only)
    assert "enricher" not in table and "every guarantee held" in table


def test_progress_rewrites_one_line_on_a_terminal():
    screen = Terminal()
    display = ProgressLine(screen)
    display.update("sent 10")
    display.update("sent 20")
    display.close()
    assert screen.getvalue() == "\rsent 10\x1b[K\rsent 20\x1b[K\n"
    assert screen.getvalue().count("\n") == 1


def test_progress_writes_one_line_per_update_elsewhere():
    log = io.StringIO()
    display = ProgressLine(log)
    display.update("sent 10")
    display.message("enricher started")
    display.update("sent 20")
    display.close()
    assert log.getvalue() == "sent 10\nenricher started\nsent 20\n"


def test_a_message_ends_the_updating_line_first():
    screen = Terminal()
    display = ProgressLine(screen)
    display.update("sent 10")
    display.message("done")
    assert screen.getvalue() == "\rsent 10\x1b[K\ndone\n"


def test_commands_stage_shows_sent_refused_and_states():
    summary = {
        **SUMMARY,
        "commands": {
            "sent": 27,
            "refused": {"UNKNOWN_DEVICE": 3},
            "states": {"EXECUTED": 24, "REJECTED": 3},
        },
    }
    table = render(summary)
    stages = [ln.split()[0] for ln in table.splitlines() if ln[:1].isalpha() and "  " in ln]
    assert stages.index("commands") == stages.index("enricher") + 1
    assert row(table, "commands")[-1] == "27"
    assert row(table, "- UNKNOWN_DEVICE")[-1] == "3"
    assert row(table, "state now")[-1] == "27"
    assert row(table, "- EXECUTED")[-1] == "24"


def test_enricher_stage_names_the_spark_master_it_ran_on():
    table = render({**SUMMARY, "spark": {"master": "spark://127.0.0.1:7077"}})
    assert row(table, "Spark master")[-1] == "spark://127.0.0.1:7077"
    assert "Spark master" not in render(SUMMARY)  # a summary written before the row existed


def test_latency_rows_keep_parked_retries_apart_and_name_the_warm_up():
    table = render(SUMMARY)
    assert row(table, "end-to-end latency p50 / p99, not parked")[-4:] == [
        "800.0",
        "/",
        "2100.5",
        "ms",
    ]
    assert row(table, "end-to-end latency p50 / p99, parked, then retried")[-4:-1] == [
        "21000.0",
        "/",
        "38000.0",
    ]
    assert row(table, "- warm-up left out (messages received in it)")[-2:] == ["20", "s"]
    no_warmup = {**SUMMARY, "enricher": {**SUMMARY["enricher"], "latency_warmup_s": 0.0}}
    assert "none: the run is too short" in render(no_warmup)


def _completion(message_id: str, outcome: int, written_ms: int):
    return completion_pb2.Completion(message_id=message_id, outcome=outcome), written_ms


def test_end_to_end_splits_parked_messages_and_leaves_the_warm_up_out():
    enriched, retry = completion_pb2.OUTCOME_ENRICHED, completion_pb2.OUTCOME_RETRY_SCHEDULED
    received = {"warm": 500, "a": 1_000, "b": 1_100, "late": 1_200, "dup": 1_300}
    completions = [
        _completion("warm", enriched, 900),  # received in the warm-up
        _completion("a", enriched, 1_800),
        _completion("late", retry, 1_900),  # parked: its device's master data came late
        _completion("b", enriched, 2_100),
        _completion("dup", completion_pb2.OUTCOME_DUPLICATE, 1_400),  # not enriched
        _completion("late", enriched, 31_200),
        _completion("unknown", enriched, 2_000),  # not read back from ingest
    ]
    direct, parked = end_to_end(completions, received, measured_from_ms=1_000)
    assert direct == [(1_000, 800), (1_100, 1_000)]
    assert parked == [30_000]


def test_the_warm_up_applies_only_when_it_leaves_half_the_run_measured():
    assert DevStackOptions().latency_warmup_s == 20.0  # 60 s runs
    assert DevStackOptions(duration_s=40).latency_warmup_s == 20.0
    assert DevStackOptions(duration_s=39).latency_warmup_s == 0.0
    assert DevStackOptions(duration_s=10, warmup_s=0).latency_warmup_s == 0.0


def test_connectors_stage_shows_each_connectors_device_spooled_in_kafka_and_enriched():
    readback = IngestReadback(per_device=Counter({"acme-edge-press": 9, "acme-edge-meter": 6}))
    enriched = EnrichedOutput(enriched_per_device=Counter({"acme-edge-press": 9}))
    devices = {"mqtt": "acme-edge-mqtt", "opcua": "acme-edge-press", "modbus": "acme-edge-meter"}
    connectors = connector_summary(
        devices, {"opcua": 9, "modbus": 7}, {"mqtt": "mosquitto is not installed"}, readback,
        enriched,
    )  # fmt: skip
    assert connectors["mqtt"] == {
        "device_id": "acme-edge-mqtt",
        "left_out": "mosquitto is not installed",
    }
    assert connectors["modbus"] == {
        "device_id": "acme-edge-meter", "values_spooled": 7, "messages_in_kafka": 6, "enriched": 0,
    }  # fmt: skip
    table = render({**SUMMARY, "connectors": connectors})
    stages = [ln.split()[0] for ln in table.splitlines() if ln[:1].isalpha() and "  " in ln]
    assert stages.index("connectors") == stages.index("enricher") + 1
    assert row(table, "opcua (acme-edge-press): spooled / in Kafka / ENRICHED")[-5:] == [
        "9", "/", "9", "/", "9",
    ]  # fmt: skip
    assert "mqtt (acme-edge-mqtt)  " in table and "left out" in table
    # Without the enricher there is no ENRICHED count to show.
    ingest_only = connector_summary(devices, {"opcua": 9, "modbus": 7}, {}, readback, None)
    assert ingest_only["opcua"]["enriched"] is None
    table = render({**SUMMARY, "connectors": ingest_only})
    assert row(table, "modbus (acme-edge-meter): spooled / in Kafka / ENRICHED")[-5:] == [
        "7", "/", "6", "/", "-",
    ]  # fmt: skip


def test_two_different_outcomes_for_a_message_fail_a_guarantee():
    enriched, dead = completion_pb2.OUTCOME_ENRICHED, completion_pb2.OUTCOME_DEAD_LETTERED

    def done(message_id: str, outcome: int, *event_ids: str) -> completion_pb2.Completion:
        events = [completion_pb2.EventRef(event_id=e) for e in event_ids]
        return completion_pb2.Completion(message_id=message_id, outcome=outcome, events=events)

    assert two_outcomes([
        done("a", enriched, "e1"), done("a", enriched, "e1"),  # a copy: at-least-once
        done("b", completion_pb2.OUTCOME_RETRY_SCHEDULED), done("b", enriched, "e2"),  # parked
        done("c", enriched, "e3"), done("c", completion_pb2.OUTCOME_DUPLICATE),  # resent
        done("d", enriched, "e4"), done("d", enriched, "e5"),  # enriched twice, differently
        done("e", enriched, "e6"), done("e", dead),  # enriched and dead-lettered
    ]) == 2  # fmt: skip
    assert row(render(SUMMARY), "messages with two different outcomes")[-2:] == ["0", "PASS"]
    twice = {
        **SUMMARY,
        "enricher": {**SUMMARY["enricher"], "messages_with_two_different_outcomes": 1},
    }
    assert row(render(twice), "messages with two different outcomes")[-2:] == ["1", "FAIL"]


def test_the_fault_rows_say_what_was_done_and_when_the_p99_was_back():
    roll = {
        "kind": "roll", "at_ms": 0, "rolled_nodes": [1, 2, 3], "per_node_s": [21.0, 25.5, 19.2],
        "in_sync_again_after_s": 65.7, "p99_before_ms": 900.0, "p99_back_under_2s_s": 31.5,
    }  # fmt: skip
    table = render({**SUMMARY, "kafka": {"brokers": 3, "fault": roll}})
    assert row(table, "rolling restart (SIGTERM) of nodes")[-3:] == ["1,", "2,", "3"]
    assert " ".join(row(table, "- each in sync again after")[-8:]) == "21.0 s / 25.5 s / 19.2 s"
    assert row(table, "- end-to-end p99 (not parked) back under 2 s after")[-2:] == ["31.5", "s"]
    assert row(table, "- end-to-end p99 (not parked) before it")[-2:] == ["900.0", "ms"]
    leader = {
        "kind": "leader", "at_ms": 0, "killed_node": 2, "leader_of": "ingest.telemetry.v1[0]",
        "new_leader_after_s": 9.1, "in_sync_again_after_s": 30.2, "p99_before_ms": None,
        "p99_back_under_2s_s": None,
    }  # fmt: skip
    table = render({**SUMMARY, "kafka": {"brokers": 3, "fault": leader}})
    assert row(table, "leader of ingest.telemetry.v1[0] killed")[-2:] == ["node", "2"]
    assert row(table, "- every replica in sync again after")[-2:] == ["30.2", "s"]
    back = row(table, "- end-to-end p99 (not parked) back under 2 s after")
    assert back[-4:] == ["not", "within", "the", "run"]
    before = row(table, "- end-to-end p99 (not parked) before it")
    assert before[-3:] == ["no", "message", "measured"]


def test_the_p99_back_under_2_s_is_over_windows_of_receipt_times_after_the_fault():
    # 10 messages a second at 300 ms; those received in the 8 s after the fault wait 6 s.
    received = list(range(0, 60_000, 100))
    latency = [6_000.0 if 20_000 <= t < 28_000 else 300.0 for t in received]
    enriched = EnrichedOutput(end_to_end_ms=latency, end_to_end_received_ms=received)
    # The last slow one (27.9 s) leaves the 5 s window at the step 33 s: 13 s after the fault.
    assert p99_back_under_s(enriched, 20_000) == 13.0
    assert p99_back_under_s(EnrichedOutput(), 20_000) is None  # nothing enriched
    assert p99_before_ms(enriched, 20_000) == 300.0  # the 200 received before it
    assert p99_before_ms(enriched, 0) is None
