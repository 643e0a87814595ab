"""Pure units of the command parts: the book, state order, the relay's checks."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest

from headwater import record_headers as rh
from headwater.commands import model
from headwater.endpoints import COMMAND_STATUS_CONTENT_TYPE
from headwater.ingest.commands.book import CommandBook
from headwater.ingest.commands.relay import ReportsOffsetLostError, StatusRelay
from headwater.proto.commands.v1.command_pb2 import Command
from headwater.proto.commands.v1.command_status_pb2 import CommandState, CommandStatus
from headwater.proto.device.v1.device_message_pb2 import DeviceMessage

S = CommandState


def command(command_id: str, device: str = "d1", ttl_ms: int = 60_000) -> Command:
    now = int(time.time() * 1000)
    c = Command(command_id=command_id, tenant="acme", device_id=device, name="n")
    c.created_time.FromMilliseconds(now)
    c.expires_time.FromMilliseconds(now + ttl_ms)
    return c


def test_book_keeps_device_order_and_drops_repeats():
    book = CommandBook()
    woken = []
    book.on_added = woken.append
    for i in (3, 1, 2):
        assert book.add(command(f"c{i}"), 0)
    assert not book.add(command("c1"), 0)  # the same id again: one command
    assert [e.command.command_id for e in book.waiting(("acme", "d1"))] == ["c3", "c1", "c2"]
    assert woken == [("acme", "d1")] * 3


def test_delivered_ids_are_remembered_within_a_bound():
    book = CommandBook(remembered_ids=2)
    for i in range(3):
        book.add(command(f"c{i}"), 0)
        book.finish(("acme", "d1", f"c{i}"), S.COMMAND_STATE_DELIVERED)
    assert not book.known(("acme", "d1", "c0"))  # forgotten: the oldest first
    assert book.known(("acme", "d1", "c2")) and book.size == 0
    assert not book.add(command("c2"), 0) and book.add(command("c0"), 0)


def test_statuses_take_commands_out_only_from_delivered_on():
    book = CommandBook()
    book.add(command("c1"), 0)
    book.apply(
        CommandStatus(command_id="c1", tenant="acme", device_id="d1", state=S.COMMAND_STATE_QUEUED)
    )
    assert book.size == 1
    book.apply(
        CommandStatus(
            command_id="c1", tenant="acme", device_id="d1", state=S.COMMAND_STATE_EXECUTED
        )
    )
    assert book.size == 0 and book.known(("acme", "d1", "c1"))


def test_expired_commands_come_out_in_expiry_order_and_only_once():
    book = CommandBook()
    book.add(command("late", ttl_ms=-10), 0)
    book.add(command("later", ttl_ms=-5), 0)
    book.add(command("fine"), 0)
    book.finish(("acme", "d1", "later"), S.COMMAND_STATE_DELIVERED)  # delivered first
    gone = book.take_expired(int(time.time() * 1000))
    assert [e.command.command_id for e in gone] == ["late"]
    assert book.take_expired(int(time.time() * 1000)) == []
    assert [e.command.command_id for e in book.waiting(("acme", "d1"))] == ["fine"]


def test_state_order_makes_repeats_harmless():
    assert model.rank(S.COMMAND_STATE_QUEUED) < model.rank(S.COMMAND_STATE_DELIVERED)
    assert model.rank(S.COMMAND_STATE_DELIVERED) < model.rank(S.COMMAND_STATE_EXECUTED)
    assert model.rank(S.COMMAND_STATE_EXPIRED) == model.rank(S.COMMAND_STATE_FAILED)


def record(
    status: CommandStatus,
    device: str | None = None,
    content_type: str = COMMAND_STATUS_CONTENT_TYPE,
    offset: int = 0,
):
    envelope = DeviceMessage(
        message_id="m",
        device_id=device or status.device_id,
        content_type=content_type,
        payload=status.SerializeToString(),
    )
    headers = [(rh.TENANT, b"acme"), (rh.GATEWAY_ID, b"gw-a")]
    return SimpleNamespace(
        value=envelope.SerializeToString,
        headers=lambda: headers,
        topic=lambda: "reports",
        partition=lambda: 0,
        offset=lambda: offset,
    )


class StandInFeed:
    """The feed's side the relay uses; ``arrives`` are commands it 'reads' when asked."""

    def __init__(self, book: CommandBook, arrives: list[Command]) -> None:
        self.caught_up = asyncio.Event()
        self.caught_up.set()
        self._book = book
        self._arrives = arrives
        self.asked = 0

    async def read_commands_to_end(self) -> bool:
        self.asked += 1
        for c in self._arrives:
            self._book.add(c, 0)
        return True


class StandInWriter:
    def __init__(self) -> None:
        self.written: list[CommandStatus] = []

    async def send(self, topic, key, value, headers):
        self.written.append(CommandStatus.FromString(value))
        done = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done


def relay_with(book: CommandBook, arrives: list[Command] | None = None):
    seen: list[tuple[object, str]] = []
    feed = StandInFeed(book, arrives or [])
    writer = StandInWriter()
    relay = StatusRelay(
        None,  # type: ignore[arg-type]
        writer,  # type: ignore[arg-type]
        book,
        feed,  # type: ignore[arg-type]
        "reports",
        "status",
        "g",
        lambda status, reason: seen.append((status, reason)),
    )
    return relay, seen, feed, writer


def executed(command_id: str, **kw) -> CommandStatus:
    return CommandStatus(
        command_id=command_id, device_id="d1", state=S.COMMAND_STATE_EXECUTED, **kw
    )


async def test_relay_checks_every_report():
    book = CommandBook()
    book.add(command("c1"), 0)
    relay, seen, feed, writer = relay_with(book)
    cases = {
        "DEVICE_MISMATCH": record(executed("c1"), device="d2"),
        "WRONG_CONTENT_TYPE": record(executed("c1"), content_type="application/json"),
        "STATE_NOT_REPORTABLE": record(
            CommandStatus(command_id="c1", device_id="d1", state=S.COMMAND_STATE_QUEUED)
        ),
        "UNKNOWN_COMMAND": record(executed("zz")),
    }
    not_protobuf = SimpleNamespace(
        value=lambda: b"\xff\xff",
        headers=lambda: [],
        topic=lambda: "reports",
        partition=lambda: 0,
        offset=lambda: 9,
    )
    batch = [record(executed("c1", tenant="globex")), *cases.values(), not_protobuf]
    acked, offsets = await relay._relay(batch)
    await acked
    assert [(w.command_id, w.tenant, w.gateway_id) for w in writer.written] == [
        ("c1", "acme", "gw-a")  # tenant and gateway from the headers, not the payload
    ]
    assert [r for _, r in seen] == ["", *cases, "NOT_A_COMMAND_STATUS"]
    assert offsets == {("reports", 0): 10}  # the dropped ones are consumed too
    assert feed.asked == 1  # one wait for the feed per batch, not per unknown report


async def test_a_report_that_overtakes_its_command_waits_for_the_book():
    # Replica A delivered c1 and its gateway's report reached replica B's relay before
    # B's feed had read c1: the relay asks the feed for the commands written so far.
    book = CommandBook()
    relay, seen, feed, writer = relay_with(book, arrives=[command("c1")])
    acked, _ = await relay._relay([record(executed("c1"))])
    await acked
    assert feed.asked == 1 and seen[0][1] == "" and len(writer.written) == 1
    assert relay._book.known(("acme", "d1", "c1"))


def test_failed_stream_status_writes_warn_once_per_interval(caplog, monkeypatch):
    # A broker outage fails ingest's DELIVERED (and outcome) write for every command:
    # one warning with the count, not one per command.
    from headwater.ingest.commands import service

    monkeypatch.setattr(service, "_unwritten", {"count": 0, "logged_at": 0.0})
    status = model.status_of(command("c1"), CommandState.COMMAND_STATE_DELIVERED)
    for _ in range(1000):
        service._not_written(status, RuntimeError("broker down"))
    warnings = [r for r in caplog.records if "cannot write command statuses" in r.getMessage()]
    assert len(warnings) == 1
    assert service._unwritten["count"] == 999


def test_history_shows_each_state_once_in_the_order_of_a_commands_life():
    # Ingest's DELIVERED (at the ack) can land before the sender's QUEUED, and the
    # gateway reports DELIVERED again: the records are kept as read, the states folded.
    from headwater.commands.history import CommandHistory

    c = command("c1")
    log_order = [S.COMMAND_STATE_DELIVERED, S.COMMAND_STATE_QUEUED, S.COMMAND_STATE_DELIVERED]
    records = [model.status_of(c, state) for state in [*log_order, S.COMMAND_STATE_EXECUTED]]
    history = CommandHistory("c1", records)
    assert history.states == ["QUEUED", "DELIVERED", "EXECUTED"]
    assert len(history.records) == 4
    assert history.current.state == S.COMMAND_STATE_EXECUTED


async def test_an_outcome_goes_on_the_open_stream_only(tmp_path):
    from headwater.gateway import GatewayConfig, Spool
    from headwater.gateway.commands import CommandReceiver

    async def handle(_command: Command) -> bytes:
        return b""

    with Spool(tmp_path / "spool.db") as spool:
        receiver = CommandReceiver(
            spool, None, GatewayConfig(target="127.0.0.1:1"), handle, lambda: None
        )
        done = model.status_of(command("c0"), CommandState.COMMAND_STATE_EXECUTED)
        receiver._send_outcome(done)  # no stream open: nothing queued, the report carries it
        frames: asyncio.Queue = asyncio.Queue()
        receiver._frames = frames
        receiver._send_outcome(done)
        assert list(frames.get_nowait().outcomes.statuses) == [done]
        assert frames.empty()


async def test_the_feed_says_so_when_it_cannot_read_to_the_end_in_time():
    # A feed that never caught up (its topics missing, say): the relay's wait is bounded,
    # and the unknown report is then dropped as before.
    from headwater.ingest.commands.feed import CommandFeed
    from headwater.kafka.settings import KafkaSettings

    feed = CommandFeed(KafkaSettings(bootstrap_servers="127.0.0.1:1"), CommandBook(), "c", "s", "o")
    started = time.monotonic()
    assert await feed.read_commands_to_end(within_s=0.3) is False
    assert time.monotonic() - started < 2.0


def test_an_empty_bootstrap_variable_means_the_default_broker(monkeypatch):
    """As for every other command group: an empty HEADWATER_KAFKA_BOOTSTRAP_SERVERS is unset."""
    from headwater.cli import build_parser
    from headwater.kafka.options import kafka_from_args
    from headwater.kafka.settings import DEFAULT_BOOTSTRAP_SERVERS

    monkeypatch.setenv("HEADWATER_KAFKA_BOOTSTRAP_SERVERS", "")
    args = build_parser().parse_args(["command", "status", "c-1"])
    assert kafka_from_args(args).bootstrap_servers == DEFAULT_BOOTSTRAP_SERVERS


@pytest.mark.parametrize(
    ("committed", "says"),
    [
        (3, "the committed offset 3 is before the log start 10"),
        (50, "the committed offset 50 is past the log end 20"),
        (12, "the committed offset 12 is in the log (10..20) but the relay's read position"),
    ],
)
def test_a_lost_relay_offset_is_one_line_with_the_remedy(committed, says):
    error = ReportsOffsetLostError("relay", "ingest.command-status.v1", 1, committed, 10, 20)
    message = str(error)
    assert message.startswith(f"command relay group 'relay', ingest.command-status.v1[1]: {says}")
    assert "headwater offsets reset --group relay --topic ingest.command-status.v1" in message
    assert "\n" not in message and not error.retriable
