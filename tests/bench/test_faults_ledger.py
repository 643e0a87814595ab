"""The figures of ``headwater bench faults`` from its ledger: silences, goodput, the ISR check.

Pure bookkeeping on answers made up here (the command end to end is test_faults_bench.py).
"""

from __future__ import annotations

from array import array

from headwater.gateway.answers import DeliveryReport
from headwater_dev.bench.faults.isr import IsrWatch
from headwater_dev.bench.faults.ledger import OkLedger, coordinate, silence_around


def ok(partition: int, offset: int, message_id: str = "m") -> DeliveryReport:
    return DeliveryReport(message_id, "telemetry", "delivered", "OK", "", partition, offset)


def test_the_silence_is_the_longest_gap_ending_after_the_fault() -> None:
    # An answer already on its way arrives just after the fault at 10: the gap after it counts.
    assert silence_around([8.0, 9.5, 10.2, 21.0, 21.1], 10.0, 30.0) == (10.2, 21.0)
    # The gap that spans the fault starts at the last OK before it.
    assert silence_around([8.0, 9.5, 19.0, 19.5], 10.0, 30.0) == (9.5, 19.0)
    # A gap wholly before the fault is not its silence.
    assert silence_around([1.0, 9.0, 11.0, 12.0], 10.0, 30.0) == (9.0, 11.0)


def test_no_ok_since_the_fault_is_a_silence_until_the_end() -> None:
    assert silence_around([8.0, 9.5], 10.0, 30.0) == (9.5, 30.0)
    assert silence_around([], 10.0, 30.0) == (10.0, 30.0)


def test_ledger_counts_oks_by_partition_and_time_and_the_other_answers() -> None:
    ledger = OkLedger()
    for i in range(6):
        ledger.record(ok(i % 3, 100 + i, f"m{i}"))
    ledger.record(DeliveryReport("x", "telemetry", "retry", "UNAVAILABLE"))
    ledger.record(DeliveryReport("y", "telemetry", "rejected", "INVALID_ARGUMENT"))
    assert ledger.oks == 6
    assert ledger.retried == {"UNAVAILABLE": 1} and ledger.rejected == {"INVALID_ARGUMENT": 1}
    assert ledger.acked[coordinate(2, 105)] == "m5"
    assert coordinate(2, 105) != coordinate(1, 105) and coordinate(0, 7) == 7
    first, last = ledger.ok_at[0], ledger.ok_at[-1]
    assert ledger.times_on([1]) == [ledger.ok_at[1], ledger.ok_at[4]]
    assert ledger.first_ok_on([2], first) == ledger.ok_at[2]
    assert ledger.first_ok_on([0], last) is None
    assert ledger.goodput(first, last + 1.0) == 6 / (last + 1.0 - first)
    assert ledger.goodput(last + 1.0, last + 2.0) == 0.0


def test_an_ok_while_its_partition_had_one_replica_in_sync_is_counted() -> None:
    ledger = OkLedger()
    ledger.ok_at, ledger.ok_partition = array("d", [1.0, 2.0, 3.0, 4.0]), array("B", [0, 1, 0, 1])
    watch = IsrWatch("127.0.0.1:1", "unused")  # not started: the samples are made up here
    watch.samples = {0: [(0.5, 3), (2.5, 1)], 1: [(0.5, 1), (1.5, 2)]}
    # Partition 0: 3 in sync at its OK at 1.0, 1 at 3.0; partition 1: 2 at 2.0 and 4.0.
    assert watch.oks_under_min_isr(ledger) == 1
    assert watch.fewest(0.0, 1.0) == 1
    assert watch.fewest(1.0, 3.0) == 1
    assert watch.fewest(1.0, 2.0) == 2
    assert watch.fewest(5.0, 6.0) is None
