"""A redriven dead letter lands on its device's partition: one partitioner for every producer.

Live records are written by ingest's own writer (librdkafka, ``KafkaSettings.producer_config``)
to a multi-partition topic; dead letters are made from them as the enricher makes them
(source topic, partition, offset); ``dlq.redrive`` sends them back. Each redriven record
must sit on the partition of its device's live records, and that partition must be the one
the Java client's murmur2 hash picks (aiokafka's ``DefaultPartitioner`` computes it here
independently), so the JVM, aiokafka and librdkafka producers agree.
"""

from __future__ import annotations

import asyncio
import uuid

from aiokafka.partitioner import DefaultPartitioner
from confluent_kafka import Producer

from headwater.ingest.writers.confluent_writer import ConfluentWriter
from headwater.kafka.admin import ensure_topics
from headwater.kafka.read import read_topic
from headwater.kafka.settings import PARTITIONER, KafkaSettings
from headwater.ops import dlq
from headwater.proto.events.v1 import completion_pb2, dead_letter_pb2
from headwater.topics import TopicSpec

PARTITIONS = 4
DEVICES = [f"acme/dev-{i}" for i in range(12)]


async def _ingest(kafka: KafkaSettings, topic: str) -> None:
    writer = ConfluentWriter(kafka, 10.0)
    await writer.start()
    try:
        acks = [await writer.send(topic, d.encode(), b"live-" + d.encode(), []) for d in DEVICES]
        await asyncio.wait_for(asyncio.gather(*acks), 20)
    finally:
        await writer.stop(5)


def test_redriven_letters_land_on_their_devices_partition(kafka_bootstrap: str) -> None:
    kafka = KafkaSettings(bootstrap_servers=kafka_bootstrap)
    suffix = uuid.uuid4().hex[:8]
    topic, letters_topic = f"ingest.part.{suffix}", f"dl.part.{suffix}"
    ensure_topics(kafka, [TopicSpec(topic, PARTITIONS, 1), TopicSpec(letters_topic, 1, 1)])
    asyncio.run(_ingest(kafka, topic))
    live = {m.key(): m for m in read_topic(kafka, topic)}
    expected = {
        key: DefaultPartitioner()(key, list(range(PARTITIONS)), list(range(PARTITIONS)))
        for key in live
    }
    assert {k: m.partition() for k, m in live.items()} == expected
    assert len(set(expected.values())) > 1  # the devices really spread over partitions

    producer = Producer(kafka.producer_config("headwater-test"))
    for key, m in live.items():
        letter = dead_letter_pb2.DeadLetter(
            message_id=f"m-{key.decode()}",
            device_id=key.decode(),
            reason="UNKNOWN_FORMAT",
            original_value=m.value(),
            source=completion_pb2.SourceRecord(
                topic=topic, partition=m.partition(), offset=m.offset()
            ),
        )
        producer.produce(letters_topic, letter.SerializeToString(), key)
    assert producer.flush(15) == 0
    del producer

    records = list(dlq.read_dead_letters(kafka, letters_topic))
    results = list(
        dlq.redrive(
            kafka, records, "test", "partition check", dry_run=False, ingest_topics=(topic,)
        )
    )
    assert [r.sent for r in results] == [True] * len(DEVICES)

    redriven = [m for m in read_topic(kafka, topic) if m.offset() > live[m.key()].offset()]
    assert len(redriven) == len(DEVICES)
    assert {m.key(): m.partition() for m in redriven} == expected


def test_the_enricher_sink_takes_the_shared_partitioner() -> None:
    from headwater.enricher.driver.job import kafka_options
    from headwater.enricher.driver.settings import EnricherSettings

    options = kafka_options(EnricherSettings(kafka=KafkaSettings()))
    assert PARTITIONER == "murmur2_random"  # the Java client's hash: the JVM's partitions
    assert options["kafka.partitioner"] == PARTITIONER
    assert options["kafka.acks"] == "all" and options["kafka.enable.idempotence"] == "true"
