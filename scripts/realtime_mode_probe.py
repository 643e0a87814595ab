"""Does Spark's Real-Time Mode run the enricher's query? Prints what Spark answered.

    PYTHONPATH=. .venv/bin/python scripts/realtime_mode_probe.py

Starts an embedded broker, builds the enricher's query (JVM Kafka source, the Python
keyed state) and starts it with ``trigger(realTime=...)``: once with our sink, once with
Spark's Kafka sink in update mode (what Real-Time Mode asks for), sends five messages
and reports whether records came out. Re-run it on a new Spark before changing triggers.
"""

from __future__ import annotations

import tempfile
import time

from headwater.enricher.driver import job
from headwater.enricher.driver.settings import EnricherSettings
from headwater.enricher.topics import EnricherTopics
from headwater.kafka.admin import ensure_topics
from headwater.kafka.settings import KafkaSettings
from headwater.topics import TopicSpec
from headwater_dev.devstack.broker import EmbeddedBroker
from tests.support.kafkatools import ACME, Msg, acme, ingest, master, read_all


def main() -> None:
    """Run the probe and print one line per sink."""
    broker = EmbeddedBroker().start()
    bootstrap = broker.bootstrap_servers
    try:
        t = EnricherTopics.with_prefix("rt.")
        names = [*t.ingest, t.master, *t.outputs(), "rt.out"]
        ensure_topics(bootstrap, [TopicSpec(x, 1, 1, {}) for x in names])
        s = EnricherSettings(
            checkpoint_location=tempfile.mkdtemp(),
            starting_offsets="earliest",
            topics=t,
            kafka=KafkaSettings(bootstrap_servers=bootstrap),
            spark_master="local[2]",
            shuffle_partitions=2,
        )
        spark = job.build_session(s)
        out = job.enrich_stream(job.read_ingest(spark, s), s)
        for sink in ("headwater-kafka", "kafka"):
            w = out.writeStream.format(sink).option("checkpointLocation", tempfile.mkdtemp())
            if sink == "kafka":
                w = w.option("kafka.bootstrap.servers", bootstrap).option("topic", "rt.out")
                w = w.outputMode("update")  # Real-Time Mode refuses append
            try:
                q = w.trigger(realTime="5 seconds").start()
            except Exception as exc:
                print(f"{sink}: refused at start: {str(exc)[:300]}")
                continue
            master(bootstrap, t, "dev-1")
            ingest(bootstrap, t, [Msg(f"m{i}", "dev-1", ACME, acme(i, 1), i + 1) for i in range(5)])
            time.sleep(20)
            failed = q.exception()
            records = len(read_all(bootstrap, "rt.out", timeout_s=5)) if sink == "kafka" else "-"
            print(f"{sink}: active={q.isActive} records_out={records} error={str(failed)[:300]}")
            q.stop()
        spark.stop()
    finally:
        broker.stop()


if __name__ == "__main__":
    main()
