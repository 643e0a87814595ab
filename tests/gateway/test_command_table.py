"""The spool's commands table is bounded: done commands are kept for the retention, their
bytes count in the spool's limit (done ones give way first), then they are deleted."""

from __future__ import annotations

import sqlite3
import time

import pytest

from headwater.commands import model
from headwater.gateway import GatewayConfig, Spool, SpoolFullError, SpoolLimits
from headwater.gateway.commands import CommandReceiver, _report
from headwater.proto.commands.v1.command_pb2 import Command
from headwater.proto.commands.v1.command_status_pb2 import CommandState


def command(command_id: str, payload: bytes = b"{}") -> Command:
    made = Command(
        command_id=command_id, tenant="acme", device_id="acme-001", name="set", payload=payload
    )
    made.expires_time.FromMilliseconds(model.now_ms() + 600_000)
    return made


def receiver(spool: Spool, retention_s: float = 86400.0) -> CommandReceiver:
    async def handle(_command: Command) -> bytes:
        return b""

    config = GatewayConfig(target="127.0.0.1:1", command_retention_s=retention_s)
    return CommandReceiver(spool, None, config, handle, lambda: None)


def finish(spool: Spool, rx: CommandReceiver, command_id: str) -> None:
    (seq,) = spool.read("SELECT seq FROM commands WHERE command_id = ?", (command_id,))[0]
    done = model.status_of(command(command_id), CommandState.COMMAND_STATE_EXECUTED)
    rx._finish(int(seq), _report(done))  # type: ignore[call-overload]


def rows(spool: Spool) -> list[str]:
    return [str(r[0]) for r in spool.read("SELECT command_id FROM commands ORDER BY seq")]


def test_done_commands_are_deleted_after_the_retention(tmp_path):
    with Spool(tmp_path / "spool.db") as spool:
        rx = receiver(spool, retention_s=0.3)
        assert rx.store_many([command(f"c{i}") for i in range(4)]) == 4
        for i in range(3):
            finish(spool, rx, f"c{i}")
        assert not rx.store(command("c0"))  # within the retention: a redelivery is known
        time.sleep(0.4)
        finish(spool, rx, "c3")  # each finish deletes what is past the retention
        assert rows(spool) == ["c3"]


def test_commands_count_in_the_spool_limit_and_done_ones_give_way(tmp_path):
    limits = SpoolLimits(max_bytes=20_000, when_full="refuse")
    with Spool(tmp_path / "spool.db", limits) as spool:
        rx = receiver(spool)
        assert rx.store_many([command(f"c{i}", b"x" * 4000) for i in range(4)]) == 4
        # 16 KB of commands waiting to run: no room for 5 KB of telemetry.
        with pytest.raises(SpoolFullError):
            spool.enqueue("telemetry", "acme-001", "application/json", b"y" * 5000)
        for i in range(4):
            finish(spool, rx, f"c{i}")
        # Done, they give way (oldest first) instead of the telemetry being refused.
        spool.enqueue("telemetry", "acme-001", "application/json", b"y" * 5000)
        assert spool.stats().counters["done_commands_dropped"] >= 1
        assert len(rows(spool)) < 4 and rows(spool) == sorted(rows(spool))
        (total,) = spool.read("SELECT total FROM command_bytes")[0]
        (actual,) = spool.read("SELECT COALESCE(SUM(LENGTH(envelope)), 0) FROM commands")[0]
        assert total == actual


def test_an_older_spool_file_gains_the_new_columns_and_its_commands_are_counted(tmp_path):
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.executescript(
        "CREATE TABLE commands (seq INTEGER PRIMARY KEY AUTOINCREMENT, device_id TEXT NOT NULL,"
        " command_id TEXT NOT NULL, envelope BLOB NOT NULL, received_ms INTEGER NOT NULL,"
        " done INTEGER NOT NULL DEFAULT 0, UNIQUE (device_id, command_id));"
    )
    envelope = command("old").SerializeToString()
    db.execute(
        "INSERT INTO commands (device_id, command_id, envelope, received_ms) VALUES (?, ?, ?, 0)",
        ("acme-001", "old", envelope),
    )
    db.commit()
    db.close()
    with Spool(path) as spool:
        assert spool.read("SELECT started_ms, finished_ms FROM commands") == [(None, None)]
        assert spool.read("SELECT total FROM command_bytes") == [(len(envelope),)]
