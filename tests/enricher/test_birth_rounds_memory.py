"""Figures (real broker, local Spark): the Python workers' memory under rounds of unit births.

Issue 35's second and third inputs together, again and again: rounds of forty Sparkplug B
births of 4,500 metrics, each metric with a new valid compound unit, to one running query.
Each birth is a ``NORMALIZE_BUDGET`` dead letter after converting what fits in its budget;
the spellings it converted stay in the units cache (4,096 spellings) and pint's caches
(trimmed past ``unit_registry.GROWTH_MAX``). The issue's target: the workers' memory flat
(+-20 MB) once those caches are full. Prints each worker's resident memory after each round.
"""

from __future__ import annotations

import time

import pytest

from headwater_dev.bench.enricher.scale_probes import rss_mib
from headwater_dev.bench.enricher.units import DBIRTH, distinct_units_birth
from tests.support.enricher import alive, settings_for, spark_memory
from tests.support.kafkatools import (
    ACME,
    Msg,
    TopicReader,
    acme,
    completions,
    ingest,
    make_topics,
    masters,
    outcome,
)

pytestmark = [pytest.mark.spark, pytest.mark.figures]

ROUNDS = 10
BIRTHS = 40
#: Growth of the largest worker allowed from the end of the second round to the last (MiB):
#: the first rounds fill the caches; the issue's target is +-20 MB after that.
FLAT_MIB = 20


def _workers(spark) -> dict[int, float]:
    """Each Python worker's resident MiB, by pid."""
    from headwater_dev.bench.enricher import cpu

    jvm = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    return {
        pid: rss_mib(pid)["rss_mib"]
        for pid, (part, _) in cpu.snapshot(jvm).items()
        if part == "python_workers"
    }


@pytest.mark.timeout(900)
def test_rounds_of_births_of_new_units_leave_the_workers_memory_flat(
    kafka_bootstrap: str, spark, running, tmp_path
) -> None:
    topics = make_topics(kafka_bootstrap)
    devices = [f"units-{b}" for b in range(BIRTHS)]
    masters(kafka_bootstrap, topics, [*devices, "warm"])
    ingest(kafka_bootstrap, topics, [Msg("warm", "warm", ACME, acme(1, 2), 1)])
    q = running(settings_for(kafka_bootstrap, topics, str(tmp_path / "cp")))
    reader = TopicReader(kafka_bootstrap, topics.completions)
    done: set[str] = set()
    parsed = 0

    def completed(wanted: set[str]):
        def check(records: list) -> bool:
            nonlocal parsed
            for c in completions(records[parsed:]):
                assert outcome(c) == "OUTCOME_DEAD_LETTERED" or c.message_id == "warm"
                done.add(c.message_id)
            parsed = len(records)
            return wanted <= done

        return check

    reader.until(completed({"warm"}), 180, alive(q))
    largest = [max(_workers(spark).values())]
    print(f"\nround 0 (warm): {spark_memory(spark)}, workers {_workers(spark)}")
    salt = 1
    for r in range(1, ROUNDS + 1):
        started = time.monotonic()
        births = []
        for d in devices:
            births.append(Msg(f"r{r}-{d}", d, DBIRTH, distinct_units_birth(4_500, salt=salt), r))
            salt += 1
        ingest(kafka_bootstrap, topics, births)
        reader.until(completed({m.message_id for m in births}), 300, alive(q))
        workers = _workers(spark)
        largest.append(max(workers.values()))
        print(
            f"round {r}: {BIRTHS} births done in {time.monotonic() - started:.1f} s; "
            f"{spark_memory(spark)}, workers {workers}"
        )
    assert q.exception() is None and q.isActive
    print(f"largest worker after each round (MiB): {largest}")
    assert largest[-1] - largest[2] <= FLAT_MIB, largest
    reader.close()
