"""Units of ``writers/producer_stats.py``: librdkafka's statistics read for stalled partitions.

The statistics are shaped as librdkafka emits them (its STATISTICS.md: ``eos``, ``brokers``,
``topics[].partitions``); the cluster test that provokes a stall on real brokers is
``test_two_of_three_down_never_answers_ok_and_recovers_by_itself``.
"""

from __future__ import annotations

from typing import Any

from headwater.ingest.writers.producer_stats import (
    STALLED_AFTER_S,
    StallWatch,
    partitions,
    producer_state,
)

TOPIC = "ingest.telemetry.v1"


def emission(**by_partition: tuple[int, int]) -> dict[str, Any]:
    """One statistics emission: ``p<N>=(records waiting, acked_msgid)`` per partition."""
    parts: dict[str, Any] = {
        # The queue of records not yet given a partition: never a partition of its own.
        "-1": {"partition": -1, "leader": -1, "msgq_cnt": 7, "acked_msgid": 0},
    }
    for key, (waiting, acked) in by_partition.items():
        n = key.removeprefix("p")
        parts[n] = {
            "partition": int(n),
            "leader": 2,
            "broker": 2,
            "msgq_cnt": waiting,
            "xmit_msgq_cnt": 0,
            "msgs_inflight": 0,
            "acked_msgid": acked,
            "next_ack_seq": acked,
            "next_err_seq": acked,
        }
    return {
        "eos": {
            "idemp_state": "Assigned",
            "idemp_stateage": 5000,
            "producer_id": 9,
            "producer_epoch": 1,
            "epoch_cnt": 1,
        },
        "brokers": {
            "127.0.0.1:9092/bootstrap": {"nodeid": -1, "state": "INIT"},
            "127.0.0.1:9093/2": {"nodeid": 2, "state": "DOWN", "stateage": 9_000_000},
        },
        "topics": {TOPIC: {"partitions": parts}},
    }


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def looks(watch: StallWatch, clock: Clock, step_s: float, *emissions: dict) -> list:
    """Feed ``emissions`` one ``step_s`` apart; return what each look answered."""
    answers = []
    for stats in emissions:
        answers.append(watch.update(partitions(stats)))
        clock.now += step_s
    return answers


def test_records_waiting_unacknowledged_for_longer_than_an_election_stall_their_partition():
    clock = Clock()
    watch = StallWatch(clock=clock)
    # p0 holds records and acknowledges nothing; p1 acknowledges at every look.
    stuck = [emission(p0=(5, 40), p1=(5, 10 + i)) for i in range(int(STALLED_AFTER_S) + 2)]
    answers = looks(watch, clock, 1.0, *stuck)
    newly = [stalled for stalled, _ in answers if stalled]
    assert newly == [{f"{TOPIC}[0]": STALLED_AFTER_S}], "told once, and only about p0"
    assert watch.stalled == {f"{TOPIC}[0]"}
    # Its next acknowledgement ends the stall, and says so once.
    stalled, recovered = watch.update(partitions(emission(p0=(5, 41), p1=(5, 99))))
    assert (stalled, recovered) == ({}, [f"{TOPIC}[0]"])
    assert watch.stalled == set()


def test_an_election_long_wait_is_no_stall():
    clock = Clock()
    watch = StallWatch(clock=clock)
    waiting = [emission(p0=(5, 40))] * int(STALLED_AFTER_S - 1)
    answers = looks(watch, clock, 1.0, *waiting, emission(p0=(5, 41)), *waiting)
    assert not any(stalled for stalled, _ in answers)


def test_an_idle_partition_is_no_stall():
    """Nothing waited since its last acknowledgement: a record after a long idle is new."""
    clock = Clock()
    watch = StallWatch(clock=clock)
    idle = [emission(p0=(0, 40))] * int(STALLED_AFTER_S * 2)
    answers = looks(watch, clock, 1.0, *idle, emission(p0=(1, 40)))
    assert not any(stalled for stalled, _ in answers)


def test_looks_with_nothing_waiting_do_not_end_a_wait_without_acknowledgement():
    """Under an outage records time out and the next come later: the queue empties now
    and then, and still nothing got through."""
    clock = Clock()
    watch = StallWatch(clock=clock)
    cycle = [emission(p0=(5, 40))] * 9 + [emission(p0=(0, 40))]
    answers = looks(watch, clock, 1.0, *cycle * 4)
    assert [stalled for stalled, _ in answers if stalled] == [{f"{TOPIC}[0]": STALLED_AFTER_S}]


def test_a_stall_whose_records_timed_out_stays_stalled_until_one_is_acknowledged():
    clock = Clock()
    watch = StallWatch(clock=clock)
    looks(watch, clock, 1.0, *[emission(p0=(5, 40))] * int(STALLED_AFTER_S + 1))
    # The records timed out (message.timeout.ms): nothing waits, nothing got through.
    answers = looks(watch, clock, 1.0, emission(p0=(0, 40)), emission(p0=(5, 40)))
    assert answers == [({}, []), ({}, [])]
    assert watch.stalled == {f"{TOPIC}[0]"}


def test_the_producer_state_names_what_to_look_at():
    stats = emission(p0=(5, 40), p1=(0, 10))
    state = producer_state(stats, {f"{TOPIC}[0]"})
    assert state["idemp_state"] == "Assigned" and state["epoch_cnt"] == 1
    down = {"state": "DOWN", "state_age_ms": 9000, "requests_in_flight": 0}
    assert state["brokers"] == {"2": down}
    assert list(state["partitions"]) == [f"{TOPIC}[0]"]
    assert state["partitions"][f"{TOPIC}[0]"]["msgq_cnt"] == 5
    assert state["partitions"][f"{TOPIC}[0]"]["leader"] == 2
    assert set(producer_state(stats)["partitions"]) == {f"{TOPIC}[0]", f"{TOPIC}[1]"}
    # Before the first emission there is nothing to say, and no error.
    assert producer_state({})["partitions"] == {}
