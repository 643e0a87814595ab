"""``headwater gateway health``: the running gateway's report, and an exit code a supervisor
(the container image's HEALTHCHECK) can act on.

A gateway in this process with a Modbus connector to pymodbus's server: healthy (exit 0)
while the device answers, unhealthy (1) once it is gone, no answer (1) once the gateway
stopped; a file without ``health.listen`` is a bad input (2). Ingest is not needed: health
is about the connectors and the spool.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
import yaml

from headwater_dev.devstack.ports import free_port
from headwater_dev.edge.modbus_device import ModbusDevice

from ..connectors.support import HEADWATER, gateway_in_process

TOKEN_ENV = "EDGE_TEST_HEALTH_TOKEN"


def write_config(tmp_path: Path, device_port: int, listen: str | None) -> Path:
    doc = {
        "ingest": {"target": f"127.0.0.1:{free_port()}", "token_env": TOKEN_ENV},
        "spool": {"path": str(tmp_path / "spool.db"), "synchronous": "NORMAL"},
        "health": {"log_every_s": 0, **({"listen": listen} if listen else {})},
        "connectors": [{
            "name": "meter", "type": "modbus", "host": "127.0.0.1", "port": device_port,
            "device_id": "acme-meter-h", "poll_interval_s": 0.2,
            "registers": [{"name": "power", "table": "holding", "address": 0}],
        }],
    }  # fmt: skip
    path = tmp_path / ("gateway.yaml" if listen else "no-listen.yaml")
    path.write_text(yaml.safe_dump(doc))
    return path


async def health(config: Path) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        HEADWATER, "gateway", "health", "--config", str(config),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def health_until(config: Path, code: int, within_s: float) -> tuple[str, str]:
    """Ask until the command exits ``code`` (the connector's state changes on its next poll)."""
    deadline = time.monotonic() + within_s
    while True:
        got, out, err = await health(config)
        if got == code:
            return out, err
        assert time.monotonic() < deadline, f"exit {got}, not {code}: {out}{err}"
        await asyncio.sleep(0.3)


async def test_health_exits_0_while_connected_1_when_not_and_2_without_a_listener(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TOKEN_ENV, "a-token")  # the gateway here and the command read it
    device = ModbusDevice(free_port())
    await device.start()
    config = write_config(tmp_path, device.port, f"0.0.0.0:{free_port()}")
    try:
        async with gateway_in_process(config):
            out, _ = await health_until(config, 0, 30)
            report = json.loads(out)
            assert report["ok"] is True and report["connectors"]["meter"]["connected"] is True
            assert report["spool"]["max_bytes"] > 0
            await device.stop()
            out, _ = await health_until(config, 1, 30)
            assert json.loads(out)["connectors"]["meter"]["connected"] is False
    finally:
        await device.stop()
    code, out, err = await health(config)
    assert (code, out) == (1, "") and "no answer on 0.0.0.0:" in err
    code, _, err = await health(write_config(tmp_path, device.port, None))
    assert code == 2 and err.strip().endswith("no-listen.yaml: no health.listen"), err
