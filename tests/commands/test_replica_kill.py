"""SIGKILL of an ingest replica: two ``headwater ingest serve`` processes, a gateway on
both (round robin); the replica holding the command stream is killed mid-run and every
command still reaches the gateway, in order (the survivor's book has them)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import grpc
import pytest

from headwater_dev.devstack.ports import free_port
from tests.support.ingest import TOKENS_YAML
from tests.support.launch import launch

from .support import running_gateway, send, wait_for_states

pytestmark = pytest.mark.timeout(240)


def start_replica(
    topics, port: int, tokens: Path, group: str, log: Path, **more_env: str
) -> subprocess.Popen[bytes]:
    env = {
        **more_env,
        **os.environ,
        "HEADWATER_KAFKA_BOOTSTRAP_SERVERS": topics.kafka.bootstrap_servers,
        "HEADWATER_INGEST_LISTEN_ADDRESS": f"127.0.0.1:{port}",
        "HEADWATER_INGEST_METRICS_PORT": "0",
        "HEADWATER_INGEST_TOKENS_FILE": str(tokens),
        "HEADWATER_INGEST_COMMANDS_TOPIC_PREFIX": topics.prefix,
        "HEADWATER_INGEST_COMMANDS_RELAY_GROUP": group,
        "HEADWATER_INGEST_COMMANDS_EXPIRY_CHECK_SECONDS": "0.2",
    }
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    headwater = str(Path(sys.executable).parent / "headwater")
    with open(log, "ab") as out:
        return launch([headwater, "ingest", "serve"], env=env, stdout=out, stderr=out)


async def serving(port: int, within_s: float = 60.0) -> None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    deadline = time.monotonic() + within_s
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < deadline:
            try:
                answer = await stub.Check(health_pb2.HealthCheckRequest(), timeout=2)
                if answer.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.aio.AioRpcError:
                pass
            await asyncio.sleep(0.3)
    raise AssertionError(f"replica on {port} not SERVING in {within_s}s")


class Recorder:
    def __init__(self) -> None:
        self.ran: list[str] = []

    async def __call__(self, command) -> bytes:
        self.ran.append(command.command_id)
        return b""


async def test_sigkill_of_the_replica_holding_the_stream_loses_no_command(command_topics, tmp_path):
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(TOKENS_YAML)
    group = f"relay-{uuid.uuid4().hex[:8]}"
    ports = [free_port(), free_port()]
    replicas = [
        start_replica(command_topics, p, tokens, group, tmp_path / f"ingest-{p}.log") for p in ports
    ]
    try:
        await asyncio.gather(*(serving(p) for p in ports))
        handler = Recorder()
        target = f"ipv4:127.0.0.1:{ports[0]},127.0.0.1:{ports[1]}"
        async with running_gateway(target, tmp_path / "spool.db", handler):
            ids = [f"x-{i}" for i in range(10)]
            for command_id in ids[:4]:
                await asyncio.to_thread(send, command_topics, command_id=command_id)
            await wait_for_states(command_topics, ids[:4], {"EXECUTED"}, within_s=60)
            # Kill the replica whose log says it holds the gateway's command stream.
            logs = [(tmp_path / f"ingest-{p}.log").read_text() for p in ports]
            holders = [n for n, text in enumerate(logs) if "command stream opened" in text]
            assert len(holders) == 1, holders
            victim = replicas[holders[0]]
            victim.send_signal(signal.SIGKILL)
            victim.wait(10)
            for command_id in ids[4:]:
                await asyncio.to_thread(send, command_topics, command_id=command_id)
            histories = await wait_for_states(command_topics, ids, {"EXECUTED"}, within_s=90)
        first_runs = [i for n, i in enumerate(handler.ran) if i not in handler.ran[:n]]
        assert first_runs == ids
        assert {h.current.gateway_id for h in histories.values()} == {"gw-a"}
    finally:
        for replica in replicas:
            replica.kill()
            replica.wait(10)
