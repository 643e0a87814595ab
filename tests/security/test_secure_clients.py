"""Every Kafka client of Headwater against SASL_SSL (SCRAM-SHA-512) and mTLS listeners.

Each client gets its settings the way production does (``HEADWATER_KAFKA_*`` through
``KafkaSettings``) and must write or read over both listeners; a wrong password or CA must
fail with a message naming the variable to fix. Records are checked back over the broker's
PLAINTEXT listener, which the clients under test never use.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from headwater.cli import main
from headwater.kafka.admin import ensure_topics
from headwater.kafka.read import read_topic
from headwater.kafka.settings import KafkaSettings
from headwater.proto.events.v1 import completion_pb2, dead_letter_pb2
from headwater.subscriber import Delivery, Subscriber, SubscriberSettings, decode_completion
from headwater.topics import INGEST_TOPICS, TopicSpec, all_topics

from .conftest import SecureKafka

LISTENERS = ["sasl", "mtls"]


def _new_topic(secure: SecureKafka, listener: str, partitions: int = 1) -> str:
    """Create a topic through ``listener`` (``ensure_topics`` is the client under test)."""
    name = f"sec.{uuid.uuid4().hex[:10]}"
    reports = ensure_topics(secure.settings(listener), [TopicSpec(name, partitions, 1)])
    assert [r.action for r in reports] == ["created"]
    return name


def _plain_read(secure: SecureKafka, topic: str) -> list[tuple[int, bytes | None, bytes | None]]:
    """(partition, key, value) of every record, read over the PLAINTEXT listener."""
    plain = KafkaSettings(bootstrap_servers=secure.plaintext)
    return [(m.partition() or 0, m.key(), m.value()) for m in read_topic(plain, topic)]


@pytest.fixture
def env_of(monkeypatch: pytest.MonkeyPatch, secure_kafka: SecureKafka) -> Iterator[object]:
    """Set the process environment to a listener's ``HEADWATER_KAFKA_*`` (for the CLI)."""

    def apply(listener: str, **overrides: str) -> None:
        env = (
            secure_kafka.sasl_env(**overrides)
            if listener == "sasl"
            else secure_kafka.mtls_env(**overrides)
        )
        for name, value in env.items():
            monkeypatch.setenv(name, value)

    yield apply


@pytest.mark.parametrize("listener", LISTENERS)
def test_topics_ensure_command(secure_kafka, env_of, listener, capsys):
    env_of(listener)
    assert (
        main(["topics", "ensure", "--partitions", "1", "--replication-factor", "1", "--json"]) == 0
    )
    reports = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    expected = {spec.name for spec in all_topics(1, 1)}
    assert {r["name"] for r in reports} == expected
    assert {r["action"] for r in reports} <= {"created", "ok"}
    # Really there: seen over the other (PLAINTEXT) listener.
    existing = Consumer({"bootstrap.servers": secure_kafka.plaintext, "group.id": "x"})
    try:
        assert expected <= set(existing.list_topics(timeout=10).topics)
    finally:
        existing.close()


@pytest.mark.parametrize("listener", LISTENERS)
async def test_ingest_writers_produce(secure_kafka, listener):
    from headwater.ingest.writers.aiokafka_writer import AiokafkaWriter
    from headwater.ingest.writers.confluent_writer import ConfluentWriter
    from headwater.ingest.writers.protocol import Delivered

    settings = secure_kafka.settings(listener)
    topic = _new_topic(secure_kafka, listener, partitions=3)
    partitions = []
    for writer in (ConfluentWriter(settings, 10.0), AiokafkaWriter(settings, 10.0)):
        await writer.start()
        try:
            ack = await asyncio.wait_for(
                await writer.send(topic, b"acme/dev-7", type(writer).__name__.encode(), []), 15
            )
            # Both answer in the protocol's own terms, whatever their client returns.
            assert isinstance(ack, Delivered) and ack.topic == topic, ack
            partitions.append(ack.partition)
        finally:
            await writer.stop(5)
    records = _plain_read(secure_kafka, topic)
    assert sorted(v or b"" for _, _, v in records) == [b"AiokafkaWriter", b"ConfluentWriter"]
    # Both clients hash the key the same way (the shared partitioner).
    assert len(set(partitions)) == 1 and {p for p, _, _ in records} == set(partitions)


def _dead_letter(message_id: str) -> bytes:
    return dead_letter_pb2.DeadLetter(
        message_id=message_id,
        device_id="dev-7",
        reason="UNKNOWN_FORMAT",
        original_value=b"original-" + message_id.encode(),
        source=completion_pb2.SourceRecord(topic=INGEST_TOPICS["telemetry"], partition=0, offset=0),
    ).SerializeToString()


@pytest.mark.parametrize("listener", LISTENERS)
def test_dlq_offsets_and_lag_commands(secure_kafka, env_of, listener, capsys):
    settings = secure_kafka.settings(listener)
    ensure_topics(settings, [TopicSpec(INGEST_TOPICS["telemetry"], 1, 1)])
    dlq = _new_topic(secure_kafka, listener)
    message_id = f"m-{uuid.uuid4().hex[:8]}"
    producer = Producer(settings.producer_config("headwater-test"))
    producer.produce(dlq, _dead_letter(message_id), b"dev-7")
    assert producer.flush(15) == 0
    del producer  # closed now, not when the broker is gone
    env_of(listener)

    assert main(["dlq", "list", "--topic", dlq, "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["message_id"] for r in rows] == [message_id]

    argv = ["dlq", "redrive", "--topic", dlq, "--why", "test", "--execute", "--json"]
    assert main(argv) == 0
    assert [json.loads(line)["sent"] for line in capsys.readouterr().out.splitlines()] == [True]
    redriven = _plain_read(secure_kafka, INGEST_TOPICS["telemetry"])
    assert (0, b"dev-7", b"original-" + message_id.encode()) in redriven

    group = f"g-{uuid.uuid4().hex[:8]}"
    consumer = Consumer(settings.consumer_config("headwater-test", group))
    try:
        consumer.commit(offsets=[TopicPartition(dlq, 0, 1)], asynchronous=False)
    finally:
        consumer.close()
    assert main(["offsets", "show", "--group", group, "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["topic"], r["committed"], r["log_end"]) for r in rows] == [(dlq, 1, 1)]
    assert main(["lag", "--group", group, "--topic", dlq, "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {"group": group, "topic": dlq, "lag": 0} in [
        {k: r.get(k) for k in ("group", "topic", "lag")} for r in rows
    ]


@pytest.mark.parametrize("listener", LISTENERS)
async def test_subscriber_reads_and_commits(secure_kafka, listener):
    settings = secure_kafka.settings(listener)
    topic = _new_topic(secure_kafka, listener)
    group = f"g-{uuid.uuid4().hex[:8]}"
    ensure_topics(settings, [TopicSpec(f"{group}.deadletter.v1", 1, 1)])
    producer = Producer(settings.producer_config("headwater-test"))
    done = completion_pb2.Completion(
        message_id="m-1",
        device_id="dev-7",
        tenant="acme",
        outcome=completion_pb2.OUTCOME_ENRICHED,
        attempt=1,
    )
    producer.produce(topic, done.SerializeToString(), b"acme/dev-7")
    assert producer.flush(15) == 0
    del producer  # closed now, not when the broker is gone
    seen: list[str] = []

    async def handler(d: Delivery[completion_pb2.Completion]) -> None:
        seen.append(d.message.message_id)

    sub_settings = SubscriberSettings(group, (topic,), session_timeout_s=6.0, start="earliest")
    sub = Subscriber(settings, sub_settings, handler, decode_completion)
    stop = asyncio.Event()
    task = asyncio.create_task(sub.run(stop))
    try:
        async with asyncio.timeout(60):
            while not seen:
                assert not task.done(), task.exception()
                await asyncio.sleep(0.05)
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
    assert seen == ["m-1"]
    assert sub.counts["handled"] == 1 and sub.counts["parked"] == 0


@pytest.mark.spark
def test_enricher_jvm_source_and_sink(secure_kafka, tmp_path):
    """Spark's Kafka source reads over SASL_SSL and over mTLS, our sink writes (one query).

    Two sources in the query: one with the Java client's JAAS line (SCRAM), one with its
    PEM key store (the client certificate); the sink writes over mTLS.
    """
    import os
    import sys

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from headwater.enricher.driver import job
    from headwater.enricher.driver.settings import EnricherSettings
    from headwater.enricher.sink.kafka_sink import SINK_NAME

    sources = {listener: _new_topic(secure_kafka, listener) for listener in LISTENERS}
    sink = _new_topic(secure_kafka, "mtls")
    producer = Producer(secure_kafka.settings("sasl").producer_config("headwater-test"))
    for listener, topic in sources.items():
        producer.produce(topic, f"via-{listener}".encode(), b"acme/dev-7")
    assert producer.flush(15) == 0
    del producer  # closed now, not when the broker is gone

    existing = SparkSession.getActiveSession()
    spark = existing or (
        SparkSession.builder.master("local[1]")
        .appName("headwater-security-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.jars", job.connector_jars())
        .getOrCreate()
    )
    try:
        job.register_sources(spark)
        checkpoint = str(tmp_path / "checkpoint")
        read = [
            job.kafka_stream(
                spark,
                EnricherSettings(checkpoint_location=checkpoint, kafka=secure_kafka.settings(lis)),
                [topic],
                {"startingOffsets": "earliest"},
            )
            for lis, topic in sources.items()
        ]
        raw = read[0].unionByName(read[1])
        write_with = EnricherSettings(
            checkpoint_location=checkpoint, kafka=secure_kafka.settings("mtls")
        )
        query = (
            raw.select(F.lit(sink).alias("topic"), "key", "value", "headers")
            .writeStream.format(SINK_NAME)
            .options(**job.kafka_options(write_with))
            .option("statsPath", str(tmp_path / "stats.jsonl"))
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        try:
            # One small batch; the bound is generous for a loaded 2-core machine.
            assert query.awaitTermination(240), "the query did not finish in 240 s"
            assert query.exception() is None
        finally:
            query.stop()
    finally:
        if existing is None:
            spark.stop()
    assert sorted((k, v) for _, k, v in _plain_read(secure_kafka, sink)) == [
        (b"acme/dev-7", b"via-mtls"),
        (b"acme/dev-7", b"via-sasl"),
    ]


def test_wrong_password_names_the_setting(secure_kafka, env_of, capsys):
    env_of("sasl", HEADWATER_KAFKA_SASL_PASSWORD="not-the-password")
    assert main(["topics", "ensure", "--replication-factor", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("headwater topics ensure: Kafka refused the SASL login")
    assert "HEADWATER_KAFKA_SASL_PASSWORD" in err[-1]
    assert "not-the-password" not in "\n".join(err)  # the secret is never printed


@pytest.mark.parametrize("listener", LISTENERS)
async def test_wrong_ca_names_the_setting(secure_kafka, listener):
    from headwater.ingest.writers.confluent_writer import ConfluentWriter
    from headwater.ingest.writers.produce_errors import ProduceError

    settings = secure_kafka.settings(
        listener, HEADWATER_KAFKA_SSL_CA_LOCATION=str(secure_kafka.other_ca)
    )
    writer = ConfluentWriter(settings, 3.0)
    with pytest.raises(ProduceError, match="HEADWATER_KAFKA_SSL_CA_LOCATION"):
        await writer.start()
    await writer.stop(1)


def test_mtls_listener_refuses_a_client_without_certificate(secure_kafka):
    from headwater.kafka.diagnose import KafkaSetupError, connected_admin

    anonymous = KafkaSettings(
        bootstrap_servers=secure_kafka.mtls,
        security_protocol="SSL",
        ssl_ca_location=str(secure_kafka.ca),
    )
    with pytest.raises(KafkaSetupError, match="HEADWATER_KAFKA_SSL_CERTIFICATE_LOCATION"):
        connected_admin(anonymous, "headwater-test", timeout_s=5)
