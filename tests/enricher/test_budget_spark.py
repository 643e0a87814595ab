"""The CPU budget inside a Spark Python worker: where the normalize step really runs.

The timer's signal reaches only a process's main thread. A Spark Python worker runs
``mapInArrow`` functions and Arrow UDFs (the hop that normalizes, ``arrow_hop``) in its main
thread, so there a spinning call is interrupted, not merely measured after it returns (if
it returns).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

pytestmark = [pytest.mark.spark]


def _probe(batches: Iterator[Any]) -> Iterator[Any]:
    for row in _spin_once(batches):
        yield pa.RecordBatch.from_pylist([row])


def _spin_once(batches: Iterator[Any]) -> Iterator[dict[str, Any]]:
    import threading

    from headwater.enricher.hop import budget

    def spin() -> None:
        while True:
            pass

    for _ in batches:
        main = threading.current_thread() is threading.main_thread()
        try:
            budget.call(budget.Budget(cpu_seconds=0.03), spin)
            got = "returned"
        except budget.CpuBudgetExceeded:
            got = "interrupted"
        timed = bool(budget._timer.installed)
        yield {"main": main, "timed": timed, "got": got}


@pytest.mark.timeout(180)
def test_a_spinning_call_in_a_python_worker_is_interrupted(spark: Any) -> None:
    rows = spark.range(1).mapInArrow(_probe, "main boolean, timed boolean, got string").collect()
    assert [tuple(r) for r in rows] == [(True, True, "interrupted")]


def _udf_probe(batches: Iterator[pa.Array]) -> Iterator[pa.Array]:
    for row in _spin_once(batches):
        yield pa.array([row])


@pytest.mark.timeout(180)
def test_a_spinning_call_in_an_arrow_udf_is_interrupted(spark: Any) -> None:
    from pyspark.sql.functions import arrow_udf

    probe = arrow_udf(_udf_probe, "main boolean, timed boolean, got string")  # type: ignore[call-overload]
    rows = spark.range(1).select(probe("id").alias("p")).select("p.*").collect()
    assert [tuple(r) for r in rows] == [(True, True, "interrupted")]
