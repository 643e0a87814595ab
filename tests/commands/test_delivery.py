"""ReceiveCommands and the relay, through a raw gRPC client (real ingest, real broker)."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid

import grpc
import pytest

from headwater.commands.history import read_histories
from headwater.endpoints import COMMAND_STATUS_CONTENT_TYPE
from headwater.ingest.commands.relay import StatusRelay
from headwater.kafka.settings import KafkaSettings
from headwater.proto.commands.v1.command_status_pb2 import CommandState, CommandStatus
from headwater.proto.device.v1.device_message_pb2 import DeviceMessage
from headwater.proto.ingest.v1 import command_messages_pb2 as api
from headwater.proto.ingest.v1 import ingest_messages_pb2, ingest_service_pb2_grpc

from .conftest import bearer
from .support import send

pytestmark = pytest.mark.timeout(120)


class RawStream:
    """A ReceiveCommands stream driven by hand."""

    def __init__(self, target: str, gateway: str = "gw-a", max_unacked: int = 0) -> None:
        self.channel = grpc.aio.insecure_channel(target)
        stub = ingest_service_pb2_grpc.IngestServiceStub(self.channel)
        self.out: asyncio.Queue[api.ReceiveCommandsRequest] = asyncio.Queue()
        self.out.put_nowait(
            api.ReceiveCommandsRequest(open=api.OpenCommandStream(max_unacked=max_unacked))
        )
        self.call = stub.ReceiveCommands(self._requests(), metadata=bearer(gateway))
        # One reader for the call's life: cancelling a read() would cancel the whole call.
        self.got: asyncio.Queue[object] = asyncio.Queue()
        self.reader = asyncio.create_task(self._read())

    async def _requests(self):
        while True:
            yield await self.out.get()

    async def _read(self) -> None:
        try:
            async for response in self.call:
                self.got.put_nowait(response)
        except BaseException as exc:  # handed to the test by next()
            self.got.put_nowait(exc)

    async def next(self, within_s: float = 10.0) -> api.ReceiveCommandsResponse:
        got = await asyncio.wait_for(self.got.get(), within_s)
        if isinstance(got, BaseException):
            raise got
        return got  # type: ignore[return-value]

    async def nothing_for(self, seconds: float) -> None:
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(self.got.get(), seconds)

    def ack(self, command_id: str, device_id: str) -> None:
        self.out.put_nowait(
            api.ReceiveCommandsRequest(
                ack=api.CommandAck(command_id=command_id, device_id=device_id)
            )
        )

    def outcome(self, command_id: str, device_id: str, state: int, **fields) -> None:
        status = CommandStatus(command_id=command_id, device_id=device_id, state=state, **fields)
        status.time.FromMilliseconds(int(time.time() * 1000))
        self.outcomes([status])

    def outcomes(self, statuses: list[CommandStatus]) -> None:
        self.out.put_nowait(
            api.ReceiveCommandsRequest(outcomes=api.CommandOutcomes(statuses=statuses))
        )

    async def close(self) -> None:
        self.call.cancel()
        self.reader.cancel()
        await self.channel.close()


async def test_online_gateway_gets_its_command_and_the_ack_ends_delivery(
    command_topics, start_command_ingest
):
    ingest = await start_command_ingest()
    target = f"127.0.0.1:{ingest.port}"
    stream = RawStream(target)
    command = await asyncio.to_thread(send, command_topics, payload=b'{"c": 1}')
    got = (await stream.next()).command
    assert (got.command_id, got.payload) == (command.command_id, b'{"c": 1}')
    stream.ack(got.command_id, got.device_id)
    await asyncio.sleep(0.5)
    await stream.close()
    again = RawStream(target)
    await again.nothing_for(1.5)  # acknowledged: never sent again
    await again.close()


async def test_the_ack_itself_writes_delivered(command_topics, start_command_ingest):
    # The raw stream reports nothing: the DELIVERED on the status topic is ingest's, written
    # on the acknowledgement (the command is in the gateway's spool), with the gateway.
    ingest = await start_command_ingest()
    stream = RawStream(f"127.0.0.1:{ingest.port}")
    command = await asyncio.to_thread(send, command_topics, command_id="acked")
    got = (await stream.next()).command
    stream.ack(got.command_id, got.device_id)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        histories = await asyncio.to_thread(
            read_histories, command_topics.kafka, command_topics.status, 5
        )
        if histories[command.command_id].current.state == CommandState.COMMAND_STATE_DELIVERED:
            break
        await asyncio.sleep(0.2)
    current = histories[command.command_id].current
    assert (current.state, current.gateway_id, current.tenant) == (
        CommandState.COMMAND_STATE_DELIVERED,
        "gw-a",
        "acme",
    )
    await stream.close()


async def wait_for_state(topics, command_id: str, state: int, within_s: float = 20.0):
    """The command's history once its current state is ``state``."""
    deadline = time.monotonic() + within_s
    while True:
        histories = await asyncio.to_thread(read_histories, topics.kafka, topics.status, 5)
        history = histories.get(command_id)
        if history is not None and history.current.state == state:
            return history
        if time.monotonic() > deadline:
            seen = [r.state for r in history.records] if history else []
            raise AssertionError(f"{command_id} not in state {state} within {within_s}s: {seen}")
        await asyncio.sleep(0.2)


async def test_an_outcome_on_the_stream_writes_executed_with_the_authenticated_gateway(
    command_topics, start_command_ingest
):
    # The raw stream publishes no report: the EXECUTED on the status topic is ingest's,
    # written from the outcome frame, with tenant and gateway from the credentials (the
    # frame's are forged), the result as sent.
    ingest = await start_command_ingest()
    stream = RawStream(f"127.0.0.1:{ingest.port}")
    command = await asyncio.to_thread(send, command_topics, command_id="ran", name="set-x")
    got = (await stream.next()).command
    stream.ack(got.command_id, got.device_id)
    stream.outcome(
        got.command_id,
        got.device_id,
        CommandState.COMMAND_STATE_EXECUTED,
        result=b'{"applied": true}',
        name=got.name,
        tenant="globex",
        gateway_id="gw-b",
    )
    history = await wait_for_state(
        command_topics, command.command_id, CommandState.COMMAND_STATE_EXECUTED
    )
    current = history.current
    assert (current.result, current.gateway_id, current.tenant, current.name) == (
        b'{"applied": true}',
        "gw-a",
        "acme",
        "set-x",
    )
    assert history.states == ["QUEUED", "DELIVERED", "EXECUTED"]
    await stream.nothing_for(0.5)  # accepted: no outcome_error
    await stream.close()


async def test_a_failed_outcome_on_the_stream_is_written_with_its_reason(
    command_topics, start_command_ingest
):
    # Sent before the ack, as a gateway whose ack is still queued would: the outcome
    # finishes the command, the later ack changes nothing and is not refused.
    ingest = await start_command_ingest()
    stream = RawStream(f"127.0.0.1:{ingest.port}")
    command = await asyncio.to_thread(send, command_topics, command_id="broke")
    got = (await stream.next()).command
    stream.outcome(
        got.command_id,
        got.device_id,
        CommandState.COMMAND_STATE_FAILED,
        reason="RuntimeError: valve stuck",
    )
    stream.ack(got.command_id, got.device_id)
    history = await wait_for_state(
        command_topics, command.command_id, CommandState.COMMAND_STATE_FAILED
    )
    assert (history.current.reason, history.current.gateway_id) == (
        "RuntimeError: valve stuck",
        "gw-a",
    )
    await stream.nothing_for(0.5)
    await stream.close()
    again = RawStream(f"127.0.0.1:{ingest.port}")
    await again.nothing_for(1.0)  # finished: never sent again
    await again.close()


async def test_outcomes_not_the_gateways_to_send_are_refused_on_the_stream_and_not_written(
    command_topics, start_command_ingest
):
    ingest = await start_command_ingest()
    target = f"127.0.0.1:{ingest.port}"
    acme = await asyncio.to_thread(send, command_topics, command_id="not-globex")
    owner = RawStream(target)
    got = (await owner.next()).command  # delivered (known), not acknowledged
    globex = RawStream(target, gateway="gw-b")
    globex.outcome(acme.command_id, acme.device_id, CommandState.COMMAND_STATE_EXECUTED)
    error = (await globex.next()).outcome_error
    assert (error.command_id, error.reason) == ("not-globex", "COMMAND_NOT_YOURS")
    assert "nothing was written" in error.message
    globex.outcome("no-such-command", "globex-001", CommandState.COMMAND_STATE_EXECUTED)
    assert (await globex.next()).outcome_error.reason == "UNKNOWN_COMMAND"
    # One frame, two outcomes, each refused on its own.
    owner.outcomes(
        [
            CommandStatus(
                command_id=got.command_id,
                device_id=got.device_id,
                state=CommandState.COMMAND_STATE_DELIVERED,
            ),
            CommandStatus(
                command_id=got.command_id,
                device_id=got.device_id,
                state=CommandState.COMMAND_STATE_EXECUTED,
                result=b"x" * (300 * 1024),
            ),
        ]
    )
    assert (await owner.next()).outcome_error.reason == "NOT_AN_OUTCOME"
    assert (await owner.next()).outcome_error.reason == "OUTCOME_TOO_LARGE"
    # The owner's own outcome now: written after anything the refused frames could have
    # written (one replica, one writer, one partition), so its history shows all.
    owner.outcome(got.command_id, got.device_id, CommandState.COMMAND_STATE_REJECTED)
    history = await wait_for_state(
        command_topics, acme.command_id, CommandState.COMMAND_STATE_REJECTED
    )
    assert [(r.state, r.gateway_id) for r in history.records] == [
        (CommandState.COMMAND_STATE_QUEUED, ""),
        (CommandState.COMMAND_STATE_REJECTED, "gw-a"),
    ]
    assert "no-such-command" not in await asyncio.to_thread(
        read_histories, command_topics.kafka, command_topics.status, 5
    )
    await globex.close()
    await owner.close()


async def test_unacked_commands_come_again_in_order_on_the_next_stream(
    command_topics, start_command_ingest
):
    ingest = await start_command_ingest()
    target = f"127.0.0.1:{ingest.port}"
    sent = [
        await asyncio.to_thread(send, command_topics, name=f"step-{i}", command_id=f"c-{i}")
        for i in range(5)
    ]
    stream = RawStream(target)
    first = [(await stream.next()).command.command_id for _ in sent]
    assert first == [c.command_id for c in sent]
    stream.ack("c-0", "acme-001")
    await asyncio.sleep(0.3)
    await stream.close()  # the link drops with four unacked
    stream = RawStream(target)
    second = [(await stream.next()).command.command_id for _ in range(4)]
    assert second == ["c-1", "c-2", "c-3", "c-4"]
    await stream.close()


async def test_window_holds_back_commands_until_acked(command_topics, start_command_ingest):
    ingest = await start_command_ingest(max_unacked=2)
    for i in range(3):
        await asyncio.to_thread(send, command_topics, command_id=f"w-{i}")
    stream = RawStream(f"127.0.0.1:{ingest.port}")
    assert (await stream.next()).command.command_id == "w-0"
    assert (await stream.next()).command.command_id == "w-1"
    await stream.nothing_for(1.0)
    stream.ack("w-0", "acme-001")
    assert (await stream.next()).command.command_id == "w-2"
    await stream.close()


async def test_expired_command_is_marked_and_never_delivered(command_topics, start_command_ingest):
    ingest = await start_command_ingest()
    doomed = await asyncio.to_thread(send, command_topics, ttl_s=0.5, command_id="doomed")
    await asyncio.sleep(1.5)  # the gateway is offline past the expiry
    fresh = await asyncio.to_thread(send, command_topics, command_id="fresh")
    stream = RawStream(f"127.0.0.1:{ingest.port}")
    assert (await stream.next()).command.command_id == fresh.command_id
    await stream.nothing_for(1.0)
    await stream.close()
    history = (
        await asyncio.to_thread(read_histories, command_topics.kafka, command_topics.status)
    )[doomed.command_id]
    assert history.current.state == CommandState.COMMAND_STATE_EXPIRED
    assert history.current.reason == "NOT_DELIVERED_BEFORE_EXPIRY"


async def test_a_command_id_sent_twice_is_delivered_once(command_topics, start_command_ingest):
    ingest = await start_command_ingest()
    await asyncio.to_thread(send, command_topics, command_id="twice", payload=b"1")
    await asyncio.to_thread(send, command_topics, command_id="twice", payload=b"2")
    await asyncio.to_thread(send, command_topics, command_id="after")
    stream = RawStream(f"127.0.0.1:{ingest.port}")
    got = [(await stream.next()).command for _ in range(2)]
    assert [(c.command_id, c.payload) for c in got] == [("twice", b"1"), ("after", b"")]
    await stream.nothing_for(1.0)
    await stream.close()


async def test_other_tenants_commands_are_neither_sent_nor_acknowledgeable(
    command_topics, start_command_ingest
):
    ingest = await start_command_ingest()
    target = f"127.0.0.1:{ingest.port}"
    acme = await asyncio.to_thread(send, command_topics, command_id="for-acme")
    globex = RawStream(target, gateway="gw-b")
    await globex.nothing_for(1.5)
    globex.ack(acme.command_id, acme.device_id)
    error = (await globex.next()).ack_error
    assert error.reason == "COMMAND_NOT_YOURS" and "not bound" in error.message
    globex.ack("no-such-command", "globex-001")
    assert (await globex.next()).ack_error.reason == "UNKNOWN_COMMAND"
    await globex.close()
    owner = RawStream(target)  # the refused ack acknowledged nothing
    assert (await owner.next()).command.command_id == "for-acme"
    await owner.close()


async def test_calls_without_credentials_or_over_the_stream_limit_are_refused(
    command_topics, start_command_ingest
):
    ingest = await start_command_ingest(max_streams_per_gateway=1)
    target = f"127.0.0.1:{ingest.port}"
    async with grpc.aio.insecure_channel(target) as channel:
        stub = ingest_service_pb2_grpc.IngestServiceStub(channel)
        call = stub.ReceiveCommands(
            iter([api.ReceiveCommandsRequest(open=api.OpenCommandStream())])
        )
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await call.read()
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
    first = RawStream(target)
    await asyncio.to_thread(send, command_topics, command_id="limit")
    assert (await first.next()).command.command_id == "limit"
    second = RawStream(target)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await second.next()
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    await first.close()
    await second.close()


async def test_a_command_stream_holds_one_of_the_gateways_stream_slots(
    command_topics, start_command_ingest
):
    # A gateway's max_streams (and the replica's) count command streams too: a gateway
    # could otherwise hold every publishing stream it may, plus command streams.
    ingest = await start_command_ingest(ingest={"gateway_max_streams": 1})
    target = f"127.0.0.1:{ingest.port}"
    commands = RawStream(target)
    await asyncio.to_thread(send, command_topics, command_id="slot")
    assert (await commands.next()).command.command_id == "slot"  # open, holding the slot

    async def frames():
        await asyncio.sleep(30)
        yield b""

    async with grpc.aio.insecure_channel(target) as channel:
        telemetry = ingest_service_pb2_grpc.IngestServiceStub(channel).StreamTelemetry(
            frames(), metadata=bearer("gw-a")
        )
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await telemetry.read()
        assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "open streams" in (caught.value.details() or "")
    await commands.close()
    await asyncio.sleep(0.3)  # the closed stream gives its slot back
    again = RawStream(target)
    assert (await again.next()).command.command_id == "slot"  # unacked: sent again
    second = RawStream(target)  # and the same gateway's second stream is refused
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await second.next()
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    await second.close()
    await again.close()


def report(command, state, device=None) -> DeviceMessage:
    status = CommandStatus(
        command_id=command.command_id, device_id=device or command.device_id, state=state
    )
    msg = DeviceMessage(
        message_id=uuid.uuid4().hex,
        device_id=device or command.device_id,
        content_type=COMMAND_STATUS_CONTENT_TYPE,
        payload=status.SerializeToString(),
    )
    msg.device_time.FromMilliseconds(int(time.time() * 1000))
    return msg


async def test_reports_are_relayed_with_the_gateway_from_ingest_and_forgeries_dropped(
    command_topics, start_command_ingest
):
    ingest = await start_command_ingest()
    command = await asyncio.to_thread(send, command_topics, command_id="reported")
    async with grpc.aio.insecure_channel(f"127.0.0.1:{ingest.port}") as channel:
        stub = ingest_service_pb2_grpc.IngestServiceStub(channel)
        forged = report(command, CommandState.COMMAND_STATE_EXECUTED)
        forged_status = CommandStatus.FromString(forged.payload)
        forged_status.command_id = "never-sent"
        forged.payload = forged_status.SerializeToString()
        request = api.PublishCommandStatusRequest(
            messages=[report(command, CommandState.COMMAND_STATE_EXECUTED), forged]
        )
        answer = await stub.PublishCommandStatus(request, metadata=bearer("gw-a"))
        assert [r.code for r in answer.results] == [0, 0]  # written; checked by the relay
        # Another tenant's gateway cannot even write a report for acme's device.
        answer = await stub.PublishCommandStatus(
            api.PublishCommandStatusRequest(
                messages=[report(command, CommandState.COMMAND_STATE_FAILED)]
            ),
            metadata=bearer("gw-b"),
        )
        assert answer.results[0].code == grpc.StatusCode.PERMISSION_DENIED.value[0]
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        histories = await asyncio.to_thread(
            read_histories, command_topics.kafka, command_topics.status, 5
        )
        if histories["reported"].current.state == CommandState.COMMAND_STATE_EXECUTED:
            break
        await asyncio.sleep(0.3)
    current = histories["reported"].current
    assert (current.state, current.gateway_id, current.tenant) == (
        CommandState.COMMAND_STATE_EXECUTED,
        "gw-a",
        "acme",
    )
    assert "never-sent" not in histories


def test_ingest_messages_module_is_the_results_type():
    # The command-status endpoint answers with the same MessageResult as telemetry.
    assert api.PublishCommandStatusResponse.DESCRIPTOR.fields_by_name["results"].message_type is (
        ingest_messages_pb2.MessageResult.DESCRIPTOR
    )


async def test_a_revoked_gateway_loses_its_command_stream(
    command_topics, start_command_ingest, tokens_file
):
    ingest = await start_command_ingest()
    stream = RawStream(f"127.0.0.1:{ingest.port}")
    await asyncio.to_thread(send, command_topics, command_id="before-revocation")
    assert (await stream.next()).command.command_id == "before-revocation"
    text = tokens_file.read_text()
    tokens_file.write_text(
        text.replace('devices: ["acme-*"]', 'devices: ["acme-*"]\n    revoked: true', 1)
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stream.next(within_s=10)  # idle: the periodic check notices within a second or two
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
    await stream.close()


async def test_relay_commits_acked_batches_only_and_in_order(kafka_bootstrap, topic_factory):
    # The relay writes the next batch before the last one's statuses are acked; offsets
    # must still be committed only up to the oldest batch not yet acked, or a crash
    # would lose reports.
    from collections import deque

    from confluent_kafka import Consumer, KafkaException, TopicPartition

    topic = topic_factory("relay-commits", partitions=2)
    kafka = KafkaSettings(bootstrap_servers=kafka_bootstrap)
    consumer = Consumer(kafka.consumer_config("test", f"relay-{uuid.uuid4().hex[:8]}"))
    loop = asyncio.get_running_loop()
    older, newer = loop.create_future(), loop.create_future()
    pending = deque([(older, {(topic, 0): 5}), (newer, {(topic, 0): 9, (topic, 1): 3})])
    newer.set_result([])
    StatusRelay._commit_acked(consumer, pending)
    assert len(pending) == 2  # the older batch is not acked: nothing is committed

    def committed() -> list[int] | None:
        parts = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
        try:
            return [tp.offset for tp in consumer.committed(parts, timeout=10)]
        except KafkaException:  # a fresh broker's group coordinator is still loading
            return None

    def committed_once(ok) -> list[int] | None:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + 10
        while not ok(now := committed()) and time.monotonic() < deadline:
            time.sleep(0.1)
        return now

    older.set_result([])
    StatusRelay._commit_acked(consumer, pending)
    assert not pending
    assert await asyncio.to_thread(committed_once, lambda now: now == [9, 3]) == [9, 3]
    failed = loop.create_future()
    failed.set_exception(RuntimeError("not acked"))
    pending.append((failed, {(topic, 0): 20}))
    with pytest.raises(RuntimeError):
        StatusRelay._commit_acked(consumer, pending)  # the run ends; read again from 9
    await asyncio.sleep(0.5)
    assert await asyncio.to_thread(committed_once, lambda now: now is not None) == [9, 3]
    await asyncio.to_thread(consumer.close)


def book_and_feed(topics):
    """A command book and the feed that fills it from ``topics`` (not started)."""
    from headwater.ingest.commands.book import CommandBook
    from headwater.ingest.commands.feed import CommandFeed

    book = CommandBook()
    return book, CommandFeed(topics.kafka, book, topics.commands, topics.status, topics.owners)


async def test_commands_deleted_under_a_lagging_feed_are_reported_and_it_reads_on(
    command_topics, caplog
):
    # Seed 003: a consumer never resets its offsets by itself. The feed's default would
    # have been the log's end (every command still in the log skipped, silently); it
    # reports what retention took and goes on from what is left.
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    book, feed = book_and_feed(command_topics)
    caplog.set_level(logging.WARNING, logger="headwater.ingest.commands")
    task = asyncio.create_task(feed.run())
    try:
        await asyncio.wait_for(feed.caught_up.wait(), 30)
        partitions = [
            TopicPartition(command_topics.commands, p)
            for p in feed._consumer.list_topics(command_topics.commands, timeout=10)
            .topics[command_topics.commands]
            .partitions
        ]
        feed._consumer.pause(partitions)  # the replica falls behind
        sent = [
            await asyncio.to_thread(send, command_topics, device="acme-001", command_id=f"d{i}")
            for i in range(3)
        ]
        ends = {
            tp.partition: feed._consumer.get_watermark_offsets(tp, 10, cached=False)[1]
            for tp in partitions
        }
        (partition,) = [p for p, end in ends.items() if end >= 3]  # one device: one partition
        admin = AdminClient({"bootstrap.servers": command_topics.kafka.bootstrap_servers})
        trim = TopicPartition(command_topics.commands, partition, ends[partition] - 1)
        for future in admin.delete_records([trim]).values():  # retention takes the first two
            future.result(timeout=30)
        feed._consumer.resume(partitions)

        kept = (sent[2].tenant, sent[2].device_id, sent[2].command_id)
        deadline = time.monotonic() + 30
        while not book.known(kept):
            assert not task.done(), task.exception()
            assert time.monotonic() < deadline, "the feed did not read on after the deletion"
            await asyncio.sleep(0.1)
        assert not any(book.known((c.tenant, c.device_id, c.command_id)) for c in sent[:2])
        (line,) = [r for r in caplog.records if "were deleted (retention)" in r.getMessage()]
        where = f"{command_topics.commands}[{partition}]: records before offset"
        assert f"{where} {ends[partition] - 1} were deleted" in line.getMessage()
        later = await asyncio.to_thread(send, command_topics, device="acme-001", command_id="d3")
        assert await feed.read_commands_to_end()
        assert book.known((later.tenant, later.device_id, later.command_id))
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_the_feed_reads_the_commands_written_so_far_when_asked(command_topics):
    # What the relay relies on before dropping a report as unknown: once
    # read_commands_to_end returns True, every command written before the call is in the
    # book (without it the book lags behind the broker by a poll or more).
    book, feed = book_and_feed(command_topics)
    task = asyncio.create_task(feed.run())
    try:
        await asyncio.wait_for(feed.caught_up.wait(), 30)
        for round_ in range(3):
            sent = [
                await asyncio.to_thread(
                    send, command_topics, device=f"acme-00{i}", command_id=f"c{round_}-{i}"
                )
                for i in range(1, 6)
            ]
            assert await feed.read_commands_to_end()
            assert all(book.known((c.tenant, c.device_id, c.command_id)) for c in sent)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
