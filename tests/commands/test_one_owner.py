"""Two gateways bound to one device: each command runs on one of them, once, in order.

Both are separate processes whose handlers log each run (the device's own count, not
status records). The owner is killed (SIGKILL) halfway through the first half of the
commands; the second half, sent after the kill, goes to the other once the grace period has
passed (never to the killed one); the killed one, restarted, runs what its spool held (and
acknowledges what it was sent: those are never given to the other), and the one it was
running at the kill is reported INTERRUPTED.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from headwater.commands import CommandSender
from headwater.ingest.admission.auth import hash_token
from tests.support.ingest import TOKENS_YAML

from .support import wait_for_states
from .test_gateway_restart import start_gateway

pytestmark = pytest.mark.timeout(300)
GRACE_S = 2.0
COMMANDS = 1000
DEVICE = ("acme", "acme-001")
#: A second gateway of tenant acme bound to the same devices as gw-a (redundant gateways).
SECOND = {"gw-a": "token-a", "gw-a2": "token-a2"}


def runs(log: Path) -> list[tuple[float, str]]:
    """(time, command id) of each handler run in ``log``."""
    out = []
    for line in log.read_text().splitlines() if log.exists() else []:
        what, command_id, at = line.split()
        if what == "start":
            out.append((float(at), command_id))
    return out


def send_all(topics, ids: list[str], pace_s: float) -> None:
    with CommandSender(topics.kafka, ["*"], topic_prefix=topics.prefix) as sender:
        for command_id in ids:
            sender.send(*DEVICE, "set-setpoint", command_id=command_id)
            time.sleep(pace_s)


async def test_two_gateways_one_device_each_command_runs_once_and_fails_over(
    command_topics, start_command_ingest, tokens_file, tmp_path
):
    tokens_file.write_text(
        TOKENS_YAML
        + f"""  - id: gw-a2
    tenant: acme
    token_sha256: {hash_token("token-a2")}
    devices: ["acme-*"]
"""
    )
    ingest = await start_command_ingest(owner_grace_seconds=GRACE_S)
    assert ingest.commands is not None
    target = f"127.0.0.1:{ingest.port}"
    logs = {gw: tmp_path / f"{gw}.log" for gw in SECOND}
    spools = {gw: tmp_path / f"{gw}.db" for gw in SECOND}
    procs = {
        gw: start_gateway(target, spools[gw], logs[gw], "--work", "0.005", token=token)
        for gw, token in SECOND.items()
    }
    ids = [f"o-{i:04d}" for i in range(COMMANDS)]
    try:
        deadline = time.monotonic() + 60
        while ingest.commands.delivery.open_streams < 2:
            assert time.monotonic() < deadline, "both gateways' command streams"
            await asyncio.sleep(0.05)
        # The first half is sent, and the owner is killed in the middle of running it; the
        # second half is sent only after the kill, so it always has to fail over (were all
        # sent before, a slow machine could have them all in the owner's spool already).
        first, second = ids[: COMMANDS // 2], ids[COMMANDS // 2 :]
        sending = asyncio.create_task(asyncio.to_thread(send_all, command_topics, first, 0.002))
        while sum(len(runs(log)) for log in logs.values()) < len(first) // 2:
            assert time.monotonic() < deadline + 120
            await asyncio.sleep(0.01)
        owner = ingest.commands.owners.owner(DEVICE)
        assert owner in SECOND
        other = next(gw for gw in SECOND if gw != owner)
        assert runs(logs[other]) == []  # it never ran any: the owner had them all
        procs[owner].send_signal(signal.SIGKILL)
        procs[owner].wait(10)
        killed_at = time.time()
        await sending
        await asyncio.to_thread(send_all, command_topics, second, 0.002)
        # The other gateway runs the rest, except what was reserved to the killed one in
        # the device's lease (sent to it, or about to be as its stream ended: it may be in
        # its spool); then the killed one comes back and runs (or reports INTERRUPTED)
        # what its spool held, and acknowledges what it was sent.
        owners = ingest.commands.owners
        deadline = time.monotonic() + 120
        while any(
            owners.gateway_of(DEVICE, e.offset) != owner
            for e in ingest.commands.book.waiting(DEVICE)
        ):
            assert time.monotonic() < deadline, ingest.commands.book.size
            await asyncio.sleep(0.1)
        in_doubt = len(ingest.commands.book.waiting(DEVICE))
        assert ingest.commands.owners.owner(DEVICE) == other
        restarted_at = time.time()
        procs[owner] = start_gateway(
            target, spools[owner], logs[owner], "--work", "0.005", token=SECOND[owner]
        )
        histories = await wait_for_states(command_topics, ids, {"EXECUTED", "FAILED"}, within_s=120)
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait(10)
    everything = sorted(runs(logs["gw-a"]) + runs(logs["gw-a2"]))
    counts = Counter(command_id for _, command_id in everything)
    interrupted = [i for i in ids if histories[i].states[-1] == "FAILED"]
    assert all(histories[i].current.reason.startswith("INTERRUPTED") for i in interrupted)
    assert len(interrupted) <= 1
    # Each ran exactly once, but for the one the kill interrupted: the spool marks a
    # command started before its handler runs, so a kill between the two leaves it reported
    # INTERRUPTED ("may have run") without a run (seen on a slowed machine, `make test-slow`).
    assert [i for i, n in counts.items() if n != 1] == []
    assert set(ids) - set(counts) <= set(interrupted)
    # Order: the runs of the owner before the kill, then the other's, in the order sent;
    # only what the killed owner held in its spool ran later, after its restart.
    late = [i for at, i in runs(logs[owner]) if at >= restarted_at]
    in_time = [i for _, i in everything if i not in late]
    assert in_time == [i for i in ids if i not in late and i in counts]
    # Who ran each command is what `headwater command status` says received it.
    ran_by = {i: gw for gw in SECOND for _, i in runs(logs[gw])}
    assert all(histories[i].current.gateway_id == ran_by[i] for i in counts)
    first_after = min(at for at, _ in runs(logs[other]))
    failover_s = first_after - killed_at
    print(
        f"\none owner: {COMMANDS} commands, owner {owner} killed after "
        f"{len(runs(logs[owner])) - len(late)} runs; failover {failover_s:.2f} s "
        f"(grace {GRACE_S} s); run late by the restarted owner {len(late)}; "
        f"interrupted {len(interrupted)}; reserved to it, unacknowledged at the kill {in_doubt}"
    )
    # Issue 38's target is the grace + 2 s (measured 2.03-2.06 s with a 2 s grace): a figure
    # printed above. The test holds that the other gateway did not take over before the
    # grace (the ownership assertion above holds that it took over before the restart).
    assert failover_s >= GRACE_S - 0.5
