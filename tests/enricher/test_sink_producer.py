"""The enricher sink's producer batches a task's records into few requests."""

from __future__ import annotations

from headwater.enricher.driver import kafka_sink


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
