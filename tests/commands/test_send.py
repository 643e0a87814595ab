"""Sending commands: what is written, and every refusal (real broker)."""

from __future__ import annotations

import json
import time

import pytest

from headwater.cli import main
from headwater.commands import CommandRefusedError, CommandSender
from headwater.commands.history import read_histories
from headwater.proto.commands.v1.command_pb2 import Command
from headwater.proto.commands.v1.command_status_pb2 import CommandState, CommandStatus
from headwater_dev.devstack.readback import read_topic


def sender_for(topics, tenants=("acme",)) -> CommandSender:
    return CommandSender(topics.kafka, tenants, topic_prefix=topics.prefix)


def test_send_writes_the_command_then_queued_keyed_by_tenant_and_device(command_topics):
    with sender_for(command_topics) as sender:
        sent = sender.send("acme", "acme-001", "set-setpoint", b'{"c": 21}', ttl_s=60)
    (record,) = list(read_topic(command_topics.kafka, command_topics.commands))
    assert record.key() == b"acme/acme-001"
    command = Command.FromString(record.value())
    assert command == sent.command
    assert command.name == "set-setpoint" and command.payload == b'{"c": 21}'
    ttl_ms = command.expires_time.ToMilliseconds() - command.created_time.ToMilliseconds()
    assert ttl_ms == 60_000
    (status_record,) = list(read_topic(command_topics.kafka, command_topics.status))
    assert status_record.key() == b"acme/acme-001"
    status = CommandStatus.FromString(status_record.value())
    assert (status.command_id, status.state) == (
        command.command_id,
        CommandState.COMMAND_STATE_QUEUED,
    )
    assert status.name == "set-setpoint"


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"tenant": "globex", "device_id": "globex-001"}, "TENANT_NOT_PERMITTED"),
        ({"tenant": "acme", "device_id": "acme-999"}, "UNKNOWN_DEVICE"),
        ({"payload": b"x" * (64 * 1024 + 1)}, "PAYLOAD_TOO_LARGE"),
        ({"ttl_s": -1}, "ALREADY_EXPIRED"),
        ({"expires_at_ms": int(time.time() * 1000) - 1}, "ALREADY_EXPIRED"),
        ({"name": "bad name with spaces"}, "INVALID_COMMAND"),
    ],
)
def test_bad_input_is_refused_and_nothing_is_written(command_topics, kwargs, reason):
    args = {"tenant": "acme", "device_id": "acme-001", "name": "reboot", **kwargs}
    with sender_for(command_topics) as sender, pytest.raises(CommandRefusedError) as caught:
        sender.send(**args)
    assert caught.value.reason == reason
    assert str(caught.value)  # says what to do
    assert list(read_topic(command_topics.kafka, command_topics.commands, timeout_s=5)) == []


def test_unknown_tenant_is_named_as_such(command_topics):
    with (
        sender_for(command_topics, tenants=("*",)) as sender,
        pytest.raises(CommandRefusedError) as caught,
    ):
        sender.send("initech", "i-1", "reboot")
    assert caught.value.reason == "UNKNOWN_TENANT"


def test_cli_send_status_and_list(command_topics, tmp_path, capsys):
    payload = tmp_path / "p.json"
    payload.write_text('{"setpoint": 7}')
    common = ["--bootstrap-servers", command_topics.kafka.bootstrap_servers]
    common += ["--topic-prefix", command_topics.prefix]
    argv = ["command", "send", *common, "--tenant", "acme", "--device", "acme-002"]
    argv += ["--name", "set-setpoint", "--payload-file", str(payload), "--ttl", "30", "--json"]
    argv += ["--id", "cmd-cli-1"]
    assert main(argv) == 0
    sent = json.loads(capsys.readouterr().out)
    assert sent["command_id"] == "cmd-cli-1" and sent["state"] == "QUEUED"
    assert main(["command", "status", *common, "cmd-cli-1", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["state"], shown["device_id"], shown["states"]) == (
        "QUEUED",
        "acme-002",
        ["QUEUED"],
    )
    assert main(["command", "list", *common, "--device", "acme-002", "--json"]) == 0
    assert [json.loads(line)["command_id"] for line in capsys.readouterr().out.splitlines()] == [
        "cmd-cli-1"
    ]
    assert main(["command", "status", *common, "no-such-id"]) == 1
    assert "no command" in capsys.readouterr().err
    bad = ["command", "send", *common, "--tenant", "acme", "--device", "acme-002"]
    assert main([*bad, "--name", "x", "--ttl", "-5"]) == 2
    assert "ALREADY_EXPIRED" in capsys.readouterr().err


def test_status_folds_repeats_by_state_order(command_topics):
    with sender_for(command_topics) as sender:
        sender.send("acme", "acme-003", "reboot", command_id="same-id")
        sender.send("acme", "acme-003", "reboot", command_id="same-id")
    histories = read_histories(command_topics.kafka, command_topics.status)
    assert list(histories) == ["same-id"]
    assert [r.state for r in histories["same-id"].records] == [
        CommandState.COMMAND_STATE_QUEUED
    ] * 2


def test_list_shows_a_devices_commands_oldest_first(command_topics, capsys):
    with sender_for(command_topics) as sender:
        sender.send("acme", "acme-004", "first", command_id="z-sent-first")
        time.sleep(0.01)
        sender.send("acme", "acme-004", "second", command_id="a-sent-second")
        sender.send("acme", "acme-005", "elsewhere", command_id="other-device")
    argv = ["command", "list", "--bootstrap-servers", command_topics.kafka.bootstrap_servers]
    argv += ["--topic-prefix", command_topics.prefix, "--device", "acme-004", "--json"]
    assert main(argv) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["command_id"] for r in rows] == ["z-sent-first", "a-sent-second"]
    assert {r["state"] for r in rows} == {"QUEUED"}
