"""The subscriber against the real broker: duplicates, poison, start points, shutdown, rebalance."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer, ConsumerGroupState, TopicPartition
from confluent_kafka.admin import AdminClient
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from prometheus_client import CollectorRegistry, generate_latest

from headwater.kafka.read import read_topic
from headwater.proto.events.v1 import completion_pb2
from headwater.subscriber import (
    DeadLetterTopicError,
    Delivery,
    StartPointRequiredError,
    Subscriber,
    decode_completion,
    parking,
)

from .conftest import committed, completion, new_group, produce, run_until, sub_settings

pytestmark = pytest.mark.slow
HEADWATER = [sys.executable, "-m", "headwater.cli"]
Completion = completion_pb2.Completion


async def test_duplicates_once_poison_parked_and_the_rest_handled(
    kafka, kafka_bootstrap, topic_factory
):
    topic = topic_factory("completions")
    retried, enriched = completion_pb2.OUTCOME_RETRY_SCHEDULED, completion_pb2.OUTCOME_ENRICHED
    produce(
        kafka_bootstrap,
        topic,
        [
            completion("m1"),
            completion("m1"),  # a replayed micro-batch: the same completion again
            b"\xff\xfe not protobuf",  # undecodable: parked at once
            (completion("m-bad"), [("traceparent", b"00-abc-def-01")]),  # always fails
            completion("m-slow"),  # the handler hangs: each call times out
            completion("m2"),
            completion("m3", outcome=retried, attempt=1, offset=7),  # two facts about one
            completion("m3", outcome=enriched, attempt=2, offset=7),  # message: both count
        ],
    )
    calls: Counter[str] = Counter()

    async def handler(d: Delivery[Completion]) -> None:
        calls[d.message.message_id] += 1
        if d.message.message_id == "m-bad":
            raise RuntimeError("downstream rejects it")
        if d.message.message_id == "m-slow":
            await asyncio.sleep(3600)

    group = new_group(kafka_bootstrap)
    registry = CollectorRegistry()
    provider = MeterProvider(metric_readers=[PrometheusMetricReader(registry=registry)])
    settings = sub_settings(
        group,
        (topic,),
        max_attempts=3,
        backoff_initial_s=0.01,
        handler_timeout_s=0.3,
        start="earliest",
    )
    sub = Subscriber(kafka, settings, handler, decode_completion, meter=provider.get_meter("t"))
    await run_until(sub, lambda: sum(sub.counts.values()) == 8)

    assert calls == {"m1": 1, "m2": 1, "m3": 2, "m-bad": 3, "m-slow": 3}
    assert sub.counts == {"handled": 4, "duplicate": 1, "parked": 3}
    # The stop committed past everything done, the parked records included.
    assert committed(kafka_bootstrap, group, topic) == [8]

    parked = sorted(
        read_topic(kafka_bootstrap, f"{group}.deadletter.v1"),
        key=lambda p: dict(p.headers() or [])[parking.SOURCE],
    )
    headers = [dict(p.headers() or []) for p in parked]
    assert [h[parking.SOURCE] for h in headers] == [f"{topic}/0@{i}".encode() for i in (2, 3, 4)]
    assert [h[parking.ERROR_CLASS] for h in headers] == [
        b"DecodeError",
        b"RuntimeError",
        b"TimeoutError",
    ]
    assert [h[parking.ATTEMPTS] for h in headers] == [b"0", b"3", b"3"]
    assert headers[1][parking.ERROR_MESSAGE] == b"downstream rejects it"
    assert headers[1]["traceparent"] == b"00-abc-def-01"  # the original headers travel along
    assert {h[parking.GROUP] for h in headers} == {group.encode()}
    assert parked[0].value() == b"\xff\xfe not protobuf"
    assert Completion.FromString(parked[1].value()).message_id == "m-bad"
    assert {p.key() for p in parked} == {b"acme-1"}  # same key: per-device order holds

    text = generate_latest(registry).decode()
    for result, n in (("handled", 4), ("duplicate", 1), ("parked", 3)):
        assert _sample(text, "headwater_subscriber_records_total", f'result="{result}"') == n
    assert _sample(text, "headwater_subscriber_retries_total", 'error_class="RuntimeError"') == 2
    assert _sample(text, "headwater_subscriber_consumer_lag_records", 'partition="0"') == 0
    assert _sample(text, "headwater_subscriber_handler_duration_seconds_count", "") == 10
    # Counters and histograms with units in their names; the lag is the only gauge.
    for family, kind in (
        ("headwater_subscriber_records_total", "counter"),
        ("headwater_subscriber_retries_total", "counter"),
        ("headwater_subscriber_handler_duration_seconds", "histogram"),
        ("headwater_subscriber_consumer_lag_records", "gauge"),
    ):
        assert f"# TYPE {family} {kind}\n" in text, family


async def test_a_message_is_recognised_by_tenant_device_and_id_not_by_source_offset(
    kafka, kafka_bootstrap, topic_factory
):
    topic = topic_factory("completions")
    produce(
        kafka_bootstrap,
        topic,
        [
            completion("m1", offset=10),
            # A gateway resend enriched again after the enricher's dedup window: another
            # ingest record (another source offset), the same message: handled once.
            completion("m1", offset=99),
            # The same message id from another device and from another tenant: two messages.
            completion("m1", device="acme-2", offset=11),
            completion("m1", tenant="globex", offset=12),
        ],
    )
    seen: list[tuple[str, str, int]] = []

    async def handler(d: Delivery[Completion]) -> None:
        c = d.message
        seen.append((c.tenant, c.device_id, c.source.offset))

    group = new_group(kafka_bootstrap)
    sub = Subscriber(
        kafka, sub_settings(group, (topic,), start="earliest"), handler, decode_completion
    )
    await run_until(sub, lambda: sum(sub.counts.values()) == 4)

    assert seen == [("acme", "acme-1", 10), ("acme", "acme-2", 11), ("globex", "acme-1", 12)]
    assert sub.counts == {"handled": 3, "duplicate": 1, "parked": 0}
    assert committed(kafka_bootstrap, group, topic) == [4]


def _sample(text: str, name: str, label: str) -> float:
    (line,) = [ln for ln in text.splitlines() if ln.startswith(name + "{") and label in ln]
    return float(line.rsplit(" ", 1)[1])


async def test_no_committed_offset_stops_and_the_operator_tool_it_names_fixes_it(
    kafka, kafka_bootstrap, topic_factory
):
    topic = topic_factory("completions")
    produce(kafka_bootstrap, topic, [completion("m1")])
    handled: list[str] = []

    async def handler(d: Delivery[Completion]) -> None:
        handled.append(d.message.message_id)

    group = new_group(kafka_bootstrap)
    sub = Subscriber(kafka, sub_settings(group, (topic,)), handler, decode_completion)
    with pytest.raises(StartPointRequiredError) as info:
        await asyncio.wait_for(sub.run(asyncio.Event()), 60)
    assert (info.value.topic, info.value.partition) == (topic, 0)
    assert "no committed offset" in str(info.value)
    command = f"headwater offsets reset --group {group} --topic {topic}"
    assert command in str(info.value)
    assert committed(kafka_bootstrap, group, topic) == [-1001]  # nothing chosen for us
    assert handled == []

    # A person follows the message: the tool sets the start point, and the same
    # subscriber (still without start=) runs from there.
    reset = await asyncio.to_thread(
        subprocess.run,
        [
            *HEADWATER,
            *command.split()[1:],
            "--to",
            "earliest",
            "--execute",
            "--bootstrap-servers",
            kafka_bootstrap,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert reset.returncode == 0, reset.stdout + reset.stderr
    await run_until(sub, lambda: handled == ["m1"])
    assert committed(kafka_bootstrap, group, topic) == [1]


async def test_offset_below_the_log_start_stops_and_names_the_new_start(
    kafka, kafka_bootstrap, topic_factory
):
    topic = topic_factory("completions")
    produce(kafka_bootstrap, topic, [completion(f"m{i}") for i in range(6)])
    group = new_group(kafka_bootstrap)
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group})
    consumer.commit(offsets=[TopicPartition(topic, 0, 2)], asynchronous=False)
    consumer.close()
    # Retention takes offsets 0..3 while the subscriber is stopped (Kafka's DeleteRecords).
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})  # kept until the answer
    deleted = admin.delete_records([TopicPartition(topic, 0, 4)])
    assert next(iter(deleted.values())).result(timeout=30).low_watermark == 4

    async def handler(d: Delivery[Completion]) -> None:
        raise AssertionError("nothing may be handled past a gap without a person deciding")

    settings = sub_settings(group, (topic,), start="earliest")
    sub = Subscriber(kafka, settings, handler, decode_completion)
    # Found before joining the group (startpoints.py), so no member is disturbed.
    with pytest.raises(
        StartPointRequiredError, match="committed offset 2 is before the log start 4"
    ) as info:
        await asyncio.wait_for(sub.run(asyncio.Event()), 60)
    assert "headwater offsets reset --help" in str(info.value)
    assert committed(kafka_bootstrap, group, topic) == [2]  # left as it was


async def test_retention_overtaking_a_running_subscriber_stops_it_and_the_service_exits_2(
    kafka, kafka_bootstrap, topic_factory, tmp_path
):
    """Retention deletes records the group has not read while it runs: it stops, loud."""
    topic = topic_factory("completions")
    produce(kafka_bootstrap, topic, [completion(f"m{i}") for i in range(10)])
    group = new_group(kafka_bootstrap)
    handled: list[str] = []
    first_in_hand, go_on = asyncio.Event(), asyncio.Event()

    async def handler(d: Delivery[Completion]) -> None:
        handled.append(d.message.message_id)
        first_in_hand.set()
        await go_on.wait()

    settings = sub_settings(group, (topic,), start="earliest", max_batch=1)
    sub = Subscriber(kafka, settings, handler, decode_completion)
    task = asyncio.create_task(sub.run(asyncio.Event()))
    await asyncio.wait_for(first_in_hand.wait(), 60)
    # While it holds m0 (m1..m9 already fetched), ten more records come and retention
    # deletes all twenty: offsets 10..19 are gone before the group read them.
    produce(kafka_bootstrap, topic, [completion(f"late{i}") for i in range(10)])
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    deleted = admin.delete_records([TopicPartition(topic, 0, 20)])
    assert next(iter(deleted.values())).result(timeout=30).low_watermark == 20
    go_on.set()
    with pytest.raises(StartPointRequiredError) as info:
        await asyncio.wait_for(task, 60)
    message = str(info.value)
    assert f"consumer group {group!r}, {topic}[0]" in message
    assert "offset 10 is no longer in the log (it now starts at 20)" in message
    assert f"headwater offsets reset --group {group} --topic {topic}" in message
    assert handled == [f"m{i}" for i in range(10)]  # what was fetched, nothing guessed
    assert committed(kafka_bootstrap, group, topic) == [10]  # left where the group was

    # A service built on it (the example) exits 2 with that line, before joining the group.
    service = await asyncio.to_thread(
        subprocess.run,
        [
            sys.executable,
            str(Path(__file__).parents[2] / "examples" / "completion_subscriber.py"),
            *("--db", str(tmp_path / "counts.db"), "--group", group, "--topic", topic),
            *("--bootstrap-servers", kafka_bootstrap, "--start", "earliest"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert service.returncode == 2, service.stdout + service.stderr
    assert "the committed offset 10 is before the log start 20" in service.stdout
    assert f"headwater offsets reset --group {group} --topic {topic}" in service.stdout
    assert committed(kafka_bootstrap, group, topic) == [10]


async def test_offset_past_the_log_end_stops_even_with_a_start_point(
    kafka, kafka_bootstrap, topic_factory
):
    topic = topic_factory("completions")
    produce(kafka_bootstrap, topic, [completion("m1")])
    group = new_group(kafka_bootstrap)
    # A committed offset the log does not have (a recreated topic, or another cluster).
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group})
    consumer.commit(offsets=[TopicPartition(topic, 0, 1000)], asynchronous=False)
    consumer.close()

    async def handler(d: Delivery[Completion]) -> None:
        raise AssertionError("nothing may be handled from a guessed offset")

    # start= applies to partitions never committed, never to a lost position.
    settings = sub_settings(group, (topic,), start="earliest")
    sub = Subscriber(kafka, settings, handler, decode_completion)
    with pytest.raises(StartPointRequiredError, match="1000 is past the log end") as info:
        await asyncio.wait_for(sub.run(asyncio.Event()), 60)
    assert "headwater offsets reset --help" in str(info.value)
    assert committed(kafka_bootstrap, group, topic) == [1000]  # left as it was


async def test_stop_finishes_the_record_commits_and_leaves_and_never_passes_a_retry(
    kafka, kafka_bootstrap, topic_factory
):
    topic = topic_factory("completions")
    produce(kafka_bootstrap, topic, [completion(f"m{i}") for i in range(3)])
    group = new_group(kafka_bootstrap)
    handled: list[str] = []
    in_handler, release, failed = asyncio.Event(), asyncio.Event(), asyncio.Event()
    fail = {"m1"}

    async def handler(d: Delivery[Completion]) -> None:
        if d.message.message_id in fail:
            failed.set()
            raise ConnectionError("the database is away")
        in_handler.set()
        await release.wait()
        handled.append(d.message.message_id)

    # 1. Stop while m0 is in the handler: m0 is finished and committed, nothing after it.
    settings = sub_settings(group, (topic,), start="earliest", backoff_initial_s=60)
    sub = Subscriber(kafka, settings, handler, decode_completion)
    stop = asyncio.Event()
    task = asyncio.create_task(sub.run(stop))
    await asyncio.wait_for(in_handler.wait(), 60)
    stop.set()
    await asyncio.sleep(0.2)
    assert not task.done()  # it waits for the record in hand
    release.set()
    await asyncio.wait_for(task, 30)
    assert handled == ["m0"]
    assert committed(kafka_bootstrap, group, topic) == [1]

    # 2. No start point is needed any more; m1 fails and waits 60 s to be retried: a stop
    # then ends the run at once, and the commit does not pass m1.
    settings = sub_settings(group, (topic,), backoff_initial_s=60)
    sub = Subscriber(kafka, settings, handler, decode_completion)
    stop = asyncio.Event()
    task = asyncio.create_task(sub.run(stop))
    await asyncio.wait_for(failed.wait(), 60)
    await asyncio.sleep(0.2)  # in the backoff now (jittered: up to 60 s)
    stop.set()
    await asyncio.wait_for(task, 10)
    assert sub.counts == {"handled": 0, "duplicate": 0, "parked": 0}
    assert committed(kafka_bootstrap, group, topic) == [1]

    # 3. The next run gets m1 again (now it succeeds) and everything after it.
    fail.clear()
    sub = Subscriber(kafka, sub_settings(group, (topic,)), handler, decode_completion)
    await run_until(sub, lambda: sub.counts["handled"] == 2)
    assert handled == ["m0", "m1", "m2"]
    assert committed(kafka_bootstrap, group, topic) == [3]


async def test_rebalance_between_two_subscribers_loses_nothing(
    kafka, kafka_bootstrap, topic_factory
):
    topic = topic_factory("completions", partitions=4)
    group = new_group(kafka_bootstrap)
    handled: Counter[str] = Counter()
    by: dict[str, Counter[str]] = {"first": Counter(), "second": Counter()}

    def handler_of(name: str):
        async def handler(d: Delivery[Completion]) -> None:
            await asyncio.sleep(0.002)  # some work, so the rebalance lands mid-stream
            handled[d.message.message_id] += 1
            by[name][d.message.message_id] += 1

        return handler

    settings = sub_settings(group, (topic,), start="earliest", max_batch=20)
    first = Subscriber(kafka, settings, handler_of("first"), decode_completion)
    second = Subscriber(kafka, settings, handler_of("second"), decode_completion)
    wanted = {f"m{i}" for i in range(2000)}
    produce(kafka_bootstrap, topic, [completion(f"m{i}") for i in range(1000)], partitions=4)
    stop_first, stop_second = asyncio.Event(), asyncio.Event()
    a = asyncio.create_task(first.run(stop_first))
    b: asyncio.Task[None] | None = None
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 90
    try:
        while len(handled) < 200:
            assert loop.time() < deadline and not a.done()
            await asyncio.sleep(0.05)
        joined_at = loop.time()
        b = asyncio.create_task(second.run(stop_second))  # joins: the group rebalances
        more = [completion(f"m{i}") for i in range(1000, 2000)]
        produce(kafka_bootstrap, topic, more, partitions=4)  # while it rebalances
        while not by["second"]:
            assert loop.time() < deadline and not a.done() and not b.done()
            await asyncio.sleep(0.05)
        took_over_in = loop.time() - joined_at
        while set(handled) != wanted:
            assert loop.time() < deadline, len(handled)
            assert not a.done() and not b.done()  # neither failed
            await asyncio.sleep(0.05)
        stop_first.set()  # leaves: the second takes every partition
        await asyncio.wait_for(a, 30)
        left_at = loop.time()
        produce(kafka_bootstrap, topic, [completion(f"last-{p}") for p in range(4)], 4)
        while not {f"last-{p}" for p in range(4)} <= set(by["second"]):
            assert loop.time() < deadline, "the second did not take over"
            await asyncio.sleep(0.05)
        print(
            f"\nrebalance on this broker: join took {took_over_in:.1f}s, "
            f"takeover after a leave {loop.time() - left_at:.1f}s; "
            f"{sum(handled.values()) - len(handled)} records handled twice"
        )
    finally:
        stop_first.set()
        stop_second.set()
        await asyncio.gather(a, *([b] if b else []), return_exceptions=True)
    # The last one stopped left the group (its generation is past 0): nobody holds it.
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    assert admin.describe_consumer_groups([group])[group].result().state == (
        ConsumerGroupState.EMPTY
    )
    assert set(handled) == wanted | {f"last-{p}" for p in range(4)}
    # Each member dedups in memory only, so a repeat here would reach the handler.
    assert [k for k, n in handled.items() if n > 1] == []
    assert by["first"] and by["second"]  # both really worked
    assert committed(kafka_bootstrap, group, topic, 4) == [501] * 4


async def test_a_dead_letter_topic_that_cannot_be_written_is_found_at_start(kafka):
    # The broker, like a production cluster, creates no topic on first use.
    parker = parking.Parker(kafka, f"missing-{uuid.uuid4().hex[:8]}.deadletter.v1", "g")
    with pytest.raises(DeadLetterTopicError, match="Create it before the subscriber starts"):
        await parker.start(within_s=2)
    await parker.stop()  # harmless after a failed start
