"""SIGKILL of a gateway process: commands it acknowledged stay in its spool and run after
the restart (ingest will not send them again: they are DELIVERED)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.launch import launch

from .conftest import TOKENS
from .support import send, wait_for_states

pytestmark = pytest.mark.timeout(180)
ROOT = Path(__file__).resolve().parents[2]


def start_gateway(target: str, spool: Path, log: Path) -> subprocess.Popen[bytes]:
    return launch(
        [
            sys.executable,
            "-m",
            "tests.commands.gateway_proc",
            "--spool",
            str(spool),
            "--target",
            target,
            "--log",
            str(log),
        ],
        cwd=ROOT,
        env={**os.environ, "HEADWATER_GATEWAY_TOKEN": TOKENS["gw-a"]},
    )


def lines(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


async def test_sigkill_keeps_acknowledged_commands_and_runs_them_after_restart(
    command_topics, start_command_ingest, tmp_path
):
    ingest = await start_command_ingest()
    assert ingest.commands is not None
    target = f"127.0.0.1:{ingest.port}"
    spool, log = tmp_path / "spool.db", tmp_path / "handler.log"
    ids = [f"k-{i}" for i in range(6)]
    for command_id in ids:
        await asyncio.to_thread(send, command_topics, command_id=command_id)
    gateway = start_gateway(target, spool, log)
    try:
        # All six acknowledged (out of ingest's book) while the handler is still on the first.
        deadline = time.monotonic() + 60
        while ingest.commands.book.size or not any(line.startswith("done") for line in lines(log)):
            assert time.monotonic() < deadline, (ingest.commands.book.size, lines(log))
            await asyncio.sleep(0.05)
        gateway.send_signal(signal.SIGKILL)
        gateway.wait(10)
        finished = [line.split()[1] for line in lines(log) if line.startswith("done")]
        assert 1 <= len(finished) < len(ids), lines(log)
        assert ingest.commands.book.size == 0  # nothing left to send again: the spool has them
        gateway = start_gateway(target, spool, log)
        histories = await wait_for_states(command_topics, ids, {"EXECUTED"}, within_s=60)
    finally:
        gateway.kill()
        gateway.wait(10)
    started = [line.split()[1] for line in lines(log) if line.startswith("start")]
    # In order; the one running at the kill runs again (at least once), none is skipped.
    assert sorted(set(started)) == ids
    assert [i for n, i in enumerate(started) if i not in started[:n]] == ids
    assert all(h.current.gateway_id == "gw-a" for h in histories.values())
