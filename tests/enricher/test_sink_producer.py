"""The enricher sink's producer batches a task's records into few requests."""

from __future__ import annotations

from headwater.enricher.sink import kafka_sink


def test_the_sink_lingers_at_least_its_floor_and_keeps_a_longer_setting() -> None:
    """linger.ms below SINK_LINGER_MS is raised (flush sends at once); a longer one stays."""
    options = {"kafka.bootstrap.servers": "127.0.0.1:9", "kafka.linger.ms": "5"}
    try:
        shared = kafka_sink._producer(options)
        key = next(k for k, p in kafka_sink._PRODUCERS.items() if p is shared)
        assert ("linger.ms", str(kafka_sink.SINK_LINGER_MS)) in key
        longer = kafka_sink._producer(options | {"kafka.linger.ms": "500"})
        key = next(k for k, p in kafka_sink._PRODUCERS.items() if p is longer)
        assert ("linger.ms", "500") in key
    finally:
        kafka_sink._PRODUCERS.clear()


def test_headers_are_read_column_wise_per_row_also_from_a_slice_and_a_null_list() -> None:
    """Each row gets its own (key, value) pairs, in order; a null list or value stays empty/None."""
    import pyarrow as pa

    header = pa.struct([("key", pa.string()), ("value", pa.binary())])
    column = pa.array(
        [
            [{"key": "a", "value": b"1"}],
            None,
            [],
            [{"key": "b", "value": None}, {"key": "b", "value": b"2"}],
        ],
        type=pa.list_(header),
    )
    rows = [[("a", b"1")], [], [], [("b", None), ("b", b"2")]]
    assert kafka_sink._headers(column) == rows
    # Spark may hand over a slice: its offsets index the whole child array.
    assert kafka_sink._headers(column.slice(1)) == rows[1:]


def test_a_task_is_written_with_rare_collections_and_the_thresholds_come_back() -> None:
    """The sink reads and produces a task's rows inside ``worker_gc.batch_scope``."""
    import gc

    from headwater.enricher.hop import worker_gc

    seen: list[int] = []

    def batches():  # an empty task: read inside write(), nothing to produce
        seen.append(gc.get_threshold()[0])
        yield from ()

    before = gc.get_threshold()
    writer = kafka_sink.KafkaStreamWriter({"kafka.bootstrap.servers": "127.0.0.1:9"})
    try:
        report = writer.write(batches())
    finally:
        kafka_sink._PRODUCERS.clear()
        gc.unfreeze()  # write() froze the survivors; the suite runs with an ordinary collector
    assert seen == [worker_gc.BATCH_GEN0_THRESHOLD]
    assert gc.get_threshold() == before
    assert not report.counts
