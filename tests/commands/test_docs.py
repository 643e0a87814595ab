"""The Python examples of docs/commands.md run as written: the gateway against a real
ingest, the sender against the real broker; the state is then read with the CLI."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from pathlib import Path

import pytest

from headwater.cli import main
from headwater.kafka.admin import ensure_topics
from headwater.kafka.settings import KafkaSettings
from headwater.master.store import write
from headwater.proto.master.v1.device_master_pb2 import DeviceMaster
from headwater.topics import (
    COMMAND_OWNERS_TOPIC,
    COMMAND_STATUS_TOPIC,
    COMMANDS_TOPIC,
    MASTER_DEVICES_TOPIC,
    TopicSpec,
)
from tests.support.ingest import TOKENS

from .conftest import CommandTopics
from .support import wait_for_states

pytestmark = pytest.mark.timeout(180)
DOC = Path(__file__).parents[2] / "docs" / "commands.md"


def blocks() -> tuple[str, str]:
    found = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    sender = [b for b in found if "CommandSender(" in b]
    gateway = [b for b in found if "GatewayClient(" in b]
    assert len(found) == 2 and len(sender) == len(gateway) == 1, found
    return sender[0], gateway[0]


@pytest.fixture
def command_topics(kafka_bootstrap: str, reports_topic: str) -> CommandTopics:
    """The examples use the real topic names (no prefix): only this test writes them."""
    kafka = KafkaSettings(bootstrap_servers=kafka_bootstrap)
    ensure_topics(
        kafka_bootstrap,
        [
            TopicSpec(COMMANDS_TOPIC, 3, 1),
            TopicSpec(COMMAND_STATUS_TOPIC, 3, 1),
            TopicSpec(COMMAND_OWNERS_TOPIC, 3, 1, {"cleanup.policy": "compact"}),
            TopicSpec(MASTER_DEVICES_TOPIC, 1, 1, {"cleanup.policy": "compact"}),
        ],
    )
    write(kafka, MASTER_DEVICES_TOPIC, [DeviceMaster(tenant="acme", device_id="acme-001")])
    return CommandTopics(kafka, "")


async def test_documented_examples_send_run_and_report(
    command_topics, start_command_ingest, tmp_path, capsys
):
    sender_block, gateway_block = blocks()
    ingest = await start_command_ingest()
    env = {
        **os.environ,
        "HEADWATER_GATEWAY_TARGET": f"127.0.0.1:{ingest.port}",
        "HEADWATER_GATEWAY_TOKEN": TOKENS["gw-a"],
        "HEADWATER_KAFKA_BOOTSTRAP_SERVERS": command_topics.kafka.bootstrap_servers,
    }
    gateway = await asyncio.create_subprocess_exec(
        sys.executable, "-c", gateway_block, cwd=tmp_path, env=env, stdout=asyncio.subprocess.PIPE
    )
    try:
        sender = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            sender_block,
            cwd=tmp_path,
            env=env,
            stdout=asyncio.subprocess.PIPE,
        )
        out, _ = await asyncio.wait_for(sender.communicate(), 60)
        assert sender.returncode == 0
        command_id, state = out.decode().split()
        assert state == "QUEUED"
        assert gateway.stdout is not None
        line = await asyncio.wait_for(gateway.stdout.readline(), 60)
        assert line.decode().strip() == 'setting acme-001 {"celsius": 21.5}'
        await wait_for_states(command_topics, [command_id], {"EXECUTED"})
    finally:
        gateway.terminate()
        await gateway.wait()
    argv = ["command", "status", "--bootstrap-servers", command_topics.kafka.bootstrap_servers]
    assert await asyncio.to_thread(main, [*argv, command_id, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["state"] == "EXECUTED" and shown["states"] == ["QUEUED", "DELIVERED", "EXECUTED"]
