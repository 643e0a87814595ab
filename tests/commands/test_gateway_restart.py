"""SIGKILL of a gateway process: commands it acknowledged stay in its spool and run after
the restart (ingest will not send them again: they are DELIVERED); the one whose handler
was running is not run again (FAILED INTERRUPTED) unless its handler is idempotent."""

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


def start_gateway(
    target: str, spool: Path, log: Path, *more: str, token: str = TOKENS["gw-a"]
) -> subprocess.Popen[bytes]:
    """A gateway process of tests/commands/gateway_proc.py (``more``: its options)."""
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
            *more,
        ],
        cwd=ROOT,
        env={**os.environ, "HEADWATER_GATEWAY_TOKEN": token},
    )


def lines(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def ids_of(log: Path, what: str) -> list[str]:
    """The command ids of the log's ``what`` lines ("start" or "done"), in order."""
    return [line.split()[1] for line in lines(log) if line.startswith(what + " ")]


@pytest.mark.parametrize("idempotent", [False, True], ids=["default", "idempotent"])
async def test_sigkill_keeps_acknowledged_commands_and_never_reruns_silently(
    command_topics, start_command_ingest, tmp_path, idempotent
):
    ingest = await start_command_ingest()
    assert ingest.commands is not None
    target = f"127.0.0.1:{ingest.port}"
    spool, log = tmp_path / "spool.db", tmp_path / "handler.log"
    options = ["--work", "1.0", *(["--idempotent"] if idempotent else [])]
    ids = [f"k-{i}" for i in range(6)]
    for command_id in ids:
        await asyncio.to_thread(send, command_topics, command_id=command_id)
    gateway = start_gateway(target, spool, log, *options)
    try:
        # All six acknowledged (out of ingest's book), one done, the next one running: a
        # handler takes a second, so the kill lands while it runs.
        deadline = time.monotonic() + 60
        while (
            ingest.commands.book.size
            or not ids_of(log, "done")
            or len(ids_of(log, "start")) <= len(ids_of(log, "done"))
        ):
            assert time.monotonic() < deadline, (ingest.commands.book.size, lines(log))
            await asyncio.sleep(0.02)
        gateway.send_signal(signal.SIGKILL)
        gateway.wait(10)
        finished = ids_of(log, "done")
        interrupted = [i for i in ids_of(log, "start") if i not in finished]
        assert len(interrupted) == 1 and 1 <= len(finished) < len(ids) - 1, lines(log)
        assert ingest.commands.book.size == 0  # nothing left to send again: the spool has them
        gateway = start_gateway(target, spool, log, *options)
        expected = {"FAILED", "EXECUTED"}
        histories = await wait_for_states(command_topics, ids, expected, within_s=60)
    finally:
        gateway.kill()
        gateway.wait(10)
    started = ids_of(log, "start")
    # In order, none skipped; the interrupted one runs again only when idempotent.
    assert [i for n, i in enumerate(started) if i not in started[:n]] == ids
    (cut,) = interrupted
    assert started.count(cut) == (2 if idempotent else 1), lines(log)
    assert all(started.count(i) == 1 for i in ids if i != cut), lines(log)
    if idempotent:
        assert histories[cut].states[-1] == "EXECUTED"
    else:
        assert histories[cut].states[-1] == "FAILED"
        assert histories[cut].current.reason.startswith("INTERRUPTED: "), histories[cut].current
    others = [histories[i].states[-1] for i in ids if i != cut]
    assert others == ["EXECUTED"] * (len(ids) - 1)
    assert all(h.current.gateway_id == "gw-a" for h in histories.values())
