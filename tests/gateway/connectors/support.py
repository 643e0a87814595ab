"""Helpers of the connector tests: a gateway.yaml, the gateway in this process or in its own,
and what reached Kafka."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import yaml

from headwater.gateway.app.config import load
from headwater.gateway.app.runner import run
from headwater.proto.device.v1 import device_message_pb2
from headwater.topics import INGEST_TOPICS
from tests.support.ingest import TOKENS
from tests.support.kafkatools import read_ingest_since_test_began

HEADWATER = str(Path(sys.executable).parent / "headwater")
TOKEN_ENV = "EDGE_TEST_GATEWAY_TOKEN"


def write_config(path: Path, target: str, connectors: list[dict[str, Any]], **spool: Any) -> Path:
    """Write a gateway.yaml for gw-a (token from the environment) and return its path."""
    os.environ[TOKEN_ENV] = TOKENS["gw-a"]
    doc = {
        "ingest": {"target": target, "token_env": TOKEN_ENV, "call_timeout_s": 3},
        "spool": {"path": str(path.parent / "spool.db"), "synchronous": "NORMAL", **spool},
        "health": {"log_every_s": 0},
        "connectors": connectors,
    }
    path.write_text(yaml.safe_dump(doc))
    return path


@contextlib.asynccontextmanager
async def gateway_in_process(config_path: Path) -> AsyncIterator[asyncio.Event]:
    """Run ``headwater gateway run`` on this loop (beside the test's ingest server)."""
    stop = asyncio.Event()
    task = asyncio.create_task(run(load(config_path), stop))
    try:
        yield stop
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


async def gateway_process(config_path: Path, **kw: Any) -> asyncio.subprocess.Process:
    """Start ``headwater gateway run --config`` as its own process (logs on stderr)."""
    return await asyncio.create_subprocess_exec(
        HEADWATER, "gateway", "run", "--config", str(config_path),
        env=os.environ | {TOKEN_ENV: TOKENS["gw-a"]},
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        **kw,
    )  # fmt: skip


async def stop_process(proc: asyncio.subprocess.Process, sig: int = signal.SIGTERM) -> bytes:
    """Signal the gateway process, wait for its exit (bounded) and return its stderr."""
    if proc.returncode is None:
        proc.send_signal(sig)
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    return err


def ingested(bootstrap: str, prefix: str, endpoint: str = "telemetry") -> list[Any]:
    """Every device message the running test's time added to the endpoint's ingest topic
    whose device id starts with ``prefix``, in topic order per partition."""
    found = []
    for record in read_ingest_since_test_began(bootstrap, INGEST_TOPICS[endpoint]):
        key = record.key() or b""
        if key.decode(errors="replace").startswith(prefix):
            found.append(device_message_pb2.DeviceMessage.FromString(record.value()))
    return found


async def wait_until(condition: Callable[[], Any], within_s: float, what: str) -> Any:
    """Poll ``condition`` (in a thread: it may block) until truthy; fail after ``within_s``."""
    deadline = time.monotonic() + within_s
    while True:
        value = await asyncio.to_thread(condition)
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within_s}s: {what}")
        await asyncio.sleep(0.2)
