"""``headwater gateway run`` stops cleanly on SIGINT and SIGTERM, whatever it inherited."""

from __future__ import annotations

import asyncio
import signal
import uuid
from pathlib import Path

import pytest

from headwater_dev.devstack.ports import free_port
from tests.gateway.connectors.support import gateway_process, stop_process, write_config
from tests.support.mosquitto import Mosquitto


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
async def test_run_stops_cleanly_on_a_signal_it_inherited_ignored_and_blocked(
    tmp_path: Path, sig: int
) -> None:
    broker = Mosquitto(tmp_path / "mosquitto", free_port())
    broker.start()
    connector = {
        "name": "edge-mqtt",
        "type": "mqtt",
        "broker": {"host": "127.0.0.1", "port": broker.port, "client_id": uuid.uuid4().hex},
        "topics": [{"filter": "a/+", "device_id": "acme-{1}", "content_type": "text/plain"}],
    }
    config = write_config(tmp_path / "gateway.yaml", f"127.0.0.1:{free_port()}", [connector])

    def inherit_ignored_and_blocked() -> None:  # what a careless parent leaves behind
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})

    try:
        proc = await gateway_process(config, preexec_fn=inherit_ignored_and_blocked)
        assert proc.stderr is not None
        seen: list[bytes] = []

        async def started() -> bool:
            seen.append(await proc.stderr.readline())  # type: ignore[union-attr]
            return b"subscribed on the edge broker" in seen[-1]

        async with asyncio.timeout(30):
            while not await started():
                pass
        err = await stop_process(proc, sig)
        assert proc.returncode == 0, err.decode()[-2000:]
        assert b'"message": "gateway stopped"' in err
    finally:
        broker.stop()
