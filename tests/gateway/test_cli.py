"""``headwater gateway stats`` and ``drain`` on a real spool and the real ingest service."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from headwater.gateway.spool import Spool

from .conftest import CT, TOKENS


async def _headwater(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "headwater.cli",
        "gateway",
        *args,
        env=os.environ | (env or {}),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_drain_sends_everything_and_stats_shows_counters_and_rejections(
    start_ingest, ingest_settings, tmp_path: Path
) -> None:
    running = await start_ingest(ingest_settings)
    path = tmp_path / "spool.db"
    with Spool(path) as spool:
        for _ in range(30):
            spool.enqueue("telemetry", "acme-1", CT, b"{}")
        foreign = spool.enqueue("telemetry", "globex-1", CT, b"{}").message_id

    code, _, err = await _headwater(
        "drain",
        "--spool",
        str(path),
        "--target",
        running.target,
        "--within",
        "20",
        env={"HEADWATER_GATEWAY_TOKEN": TOKENS["gw-a"]},
    )
    assert code == 0, err[-2000:]

    code, out, err = await _headwater("stats", "--spool", str(path))
    assert code == 0, err
    stats = json.loads(out)
    assert (stats["depth"], stats["bytes"]) == (0, 0)
    assert stats["counters"]["delivered"] == 30 and stats["counters"]["rejected"] == 1
    assert [(r["message_id"], r["reason"]) for r in stats["rejected"]] == [
        (foreign, "DEVICE_NOT_PERMITTED")
    ]


async def test_stats_refuses_a_spool_held_by_a_running_gateway(tmp_path: Path) -> None:
    with Spool(tmp_path / "spool.db"):
        code, _, err = await _headwater("stats", "--spool", str(tmp_path / "spool.db"))
    assert code == 2 and "one sender per spool" in err


async def test_drain_logs_failed_calls_as_json_with_the_next_step(
    tmp_path: Path, unused_tcp_port: int
) -> None:
    """Nothing listens at the target: every line on stderr is JSON, and says what to do."""
    path = tmp_path / "spool.db"
    with Spool(path) as spool:
        spool.enqueue("telemetry", "acme-1", CT, b"{}")
    code, _, err = await _headwater(
        "drain", "--spool", str(path), "--target", f"127.0.0.1:{unused_tcp_port}", "--within", "2"
    )
    assert code == 1, err[-2000:]
    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    plain = [line for line in err.splitlines() if line and not line.startswith("{")]
    assert plain == ["messages are still spooled; see `headwater gateway stats`"], err
    failed = [e for e in lines if e["message"] == "ingest call failed; messages stay spooled"]
    assert failed, err
    assert failed[0]["code"] == "UNAVAILABLE" and failed[0]["level"] == "warning"
    assert failed[0]["spool_depth"] == 1
    assert "retries by itself" in failed[0]["next_step"]
