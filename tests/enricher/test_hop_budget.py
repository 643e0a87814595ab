"""One budget per message in the Python hop: decoding the record counts, not only normalizing.

Pure hop tests (``arrow_hop.hop_rows`` on Arrow columns, no Spark): a record that is expensive
to decode is a dead letter of its own, with the budget's reason, and the other messages of its
batch go through; what decoding used is taken off what normalizing may use.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence

import pytest

from headwater.enricher.hop import budget as budgets
from headwater.enricher.hop.arrow_hop import hop_rows
from headwater.proto.device.v1 import device_message_pb2
from tests.enricher.hop_input import TOPICS, columns, ingest
from tests.support.kafkatools import ACME, GLOBEX, Msg, acme, envelope

HEAVY_ENTRIES = 50_000


def _expensive_envelope(m: Msg, entries: int) -> bytes:
    # A valid envelope (ingest would refuse it: at most 32 attributes) whose attributes map
    # takes protobuf's C parser 0.4-1 µs an entry (more per entry as the map grows): 50,000
    # took 28 ms of CPU here, 100,000 95 ms, which is already the default budget's size on
    # a slower machine; 50,000 sit between the 5 ms and the 100 ms budgets with 3x to
    # spare either way. It runs in C, which no timer interrupts; only the measured check
    # after the call can charge it.
    dm = device_message_pb2.DeviceMessage.FromString(envelope(m))
    for i in range(entries):
        dm.attributes[f"a{i}"] = "v"
    return dm.SerializeToString()


@pytest.fixture
def five_ms() -> Iterator[budgets.Budget]:
    b = budgets.Budget(cpu_seconds=0.005)
    budgets.configure(b)
    yield b
    budgets.configure(None)


@pytest.mark.timeout(30)
def test_a_record_expensive_to_decode_is_its_own_budget_dead_letter(
    five_ms: budgets.Budget,
) -> None:
    ok = [Msg(f"ok-{i}", f"dev-{i}", ACME, acme(21.5, 40.1)) for i in range(3)]
    ok.append(Msg("ok-g", "dev-g", GLOBEX, b'{"readings": [{"k": "t", "v": 2, "u": "degC"}]}'))
    heavy = Msg("heavy", "dev-h", ACME, acme(1.0, 2.0))
    hop_rows(columns([ingest(m) for m in ok]), TOPICS.master)  # units converted once: warm
    records = [ingest(m) for m in ok[:2]]
    records.append(ingest(heavy, _expensive_envelope(heavy, HEAVY_ENTRIES)))
    records += [ingest(m) for m in ok[2:]]

    started = time.thread_time()
    rows = hop_rows(columns(records), TOPICS.master)
    spent = time.thread_time() - started

    dead = rows[2]
    assert (dead["error_stage"], dead["error_reason"], dead["error_class"]) == (
        "decode",
        "NORMALIZE_BUDGET",
        "CpuBudgetExceeded",
    )
    assert "decoding the record took more than 5 ms of CPU time" in dead["error_message"]
    assert (dead["kind"], dead["message_id"], dead["device_key"]) == ("ingest", "heavy", "dev-h")
    assert "measurements" not in dead  # never normalized
    others = rows[:2] + rows[3:]
    assert [r["message_id"] for r in others] == [m.message_id for m in ok]
    assert all(r["error_reason"] is None and r["measurements"] for r in others), others
    assert spent < 1.0  # the heavy parse (~30 ms) and the others, with slack for a loaded host


def test_the_same_record_decodes_within_the_default_budget() -> None:
    # What makes it a dead letter above is the 5 ms budget, not the record: at 100 ms it goes.
    heavy = Msg("heavy", "dev-h", ACME, acme(1.0, 2.0))
    (row,) = hop_rows(
        columns([ingest(heavy, _expensive_envelope(heavy, HEAVY_ENTRIES))]), TOPICS.master
    )
    assert row["error_reason"] is None
    assert [m["name"] for m in row["measurements"]] == ["temperature", "humidity"]


def _burn(items: Sequence[float]) -> Iterator[float]:
    for seconds in items:
        end = time.thread_time() + seconds
        while time.thread_time() < end:
            pass
        yield seconds


def test_what_an_earlier_step_spent_is_taken_off_the_budget() -> None:
    # 60 ms of a 100 ms budget: within it alone, over it after 50 ms spent decoding.
    b = budgets.Budget(cpu_seconds=0.1)
    alone = budgets.each(b, _burn, [0.06, 0.001])
    after_decode = budgets.each(b, _burn, [0.06, 0.001], spent=[0.05, 0.05])
    assert alone == [0.06, 0.001]
    assert isinstance(after_decode[0], budgets.CpuBudgetExceeded)
    assert after_decode[1] == 0.001  # the next item has its own budget


def test_each_with_cost_reports_what_each_item_used() -> None:
    b = budgets.Budget(cpu_seconds=0.1)
    results, (used_first, used_second) = budgets.each_with_cost(b, _burn, [0.02, 0.0])
    assert results == [0.02, 0.0]
    assert 0.02 <= used_first < 0.1
    assert used_second < 0.01
