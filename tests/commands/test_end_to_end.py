"""Commands end to end: sender, real ingest, real gateway library, real broker."""

from __future__ import annotations

import asyncio

import pytest

from headwater.commands.model import state_name
from headwater.gateway import RejectCommand
from headwater.proto.commands.v1.command_pb2 import Command
from tests.support.waiting import until

from .support import running_gateway, send, wait_for_states

pytestmark = pytest.mark.timeout(180)


class Recorder:
    """A handler that records what it ran, and answers by command name."""

    def __init__(self) -> None:
        self.ran: list[Command] = []

    async def __call__(self, command: Command) -> bytes:
        self.ran.append(command)
        if command.name == "explode":
            raise RuntimeError("valve stuck")
        if command.name == "unknown":
            raise RejectCommand("UNKNOWN_COMMAND", f"no handler for {command.name!r}")
        return b"ok:" + command.payload


async def test_online_command_is_delivered_executed_and_reported(
    command_topics, start_command_ingest, tmp_path
):
    ingest = await start_command_ingest()
    handler = Recorder()
    async with running_gateway(f"127.0.0.1:{ingest.port}", tmp_path / "spool.db", handler):
        ok = await asyncio.to_thread(send, command_topics, payload=b"21")
        bad = await asyncio.to_thread(send, command_topics, name="explode")
        nope = await asyncio.to_thread(send, command_topics, name="unknown")
        ids = [ok.command_id, bad.command_id, nope.command_id]
        histories = await wait_for_states(command_topics, ids, {"EXECUTED", "FAILED", "REJECTED"})
    executed = histories[ok.command_id]
    assert executed.states == ["QUEUED", "DELIVERED", "EXECUTED"]
    assert executed.current.result == b"ok:21" and executed.current.gateway_id == "gw-a"
    failed = histories[bad.command_id].current
    assert state_name(failed.state) == "FAILED" and "valve stuck" in failed.reason
    assert state_name(histories[nope.command_id].current.state) == "REJECTED"


async def test_the_outcome_comes_on_the_stream_and_as_the_spooled_report(
    command_topics, start_command_ingest, tmp_path
):
    # Two EXECUTED records: ingest's, written from the outcome the library sent on its
    # command stream as the handler returned, and the relayed report (the durable one).
    # Readers fold them: each state once.
    ingest = await start_command_ingest()
    async with running_gateway(f"127.0.0.1:{ingest.port}", tmp_path / "spool.db", Recorder()):
        command = await asyncio.to_thread(send, command_topics, payload=b"7")
        deadline = asyncio.get_running_loop().time() + 30
        while True:
            histories = await wait_for_states(command_topics, [command.command_id], {"EXECUTED"})
            history = histories[command.command_id]
            executed = [r for r in history.records if state_name(r.state) == "EXECUTED"]
            if len(executed) == 2 or asyncio.get_running_loop().time() > deadline:
                break
            await asyncio.sleep(0.3)
    assert [(r.result, r.gateway_id, r.tenant) for r in executed] == [(b"ok:7", "gw-a", "acme")] * 2
    assert history.states == ["QUEUED", "DELIVERED", "EXECUTED"]


async def test_an_outcome_while_ingest_is_down_comes_through_the_spool(
    command_topics, start_command_ingest, tmp_path
):
    # The handler returns while no ingest listens: no stream to send the outcome on; the
    # spooled report carries it once ingest is back (on the same address).
    from headwater_dev.devstack.ports import free_port

    address = f"127.0.0.1:{free_port()}"
    ingest = await start_command_ingest(ingest={"listen_address": address})
    release = asyncio.Event()
    ran: list[str] = []

    async def slow(command: Command) -> bytes:
        ran.append(command.command_id)
        await release.wait()
        return b"late"

    async with running_gateway(address, tmp_path / "spool.db", slow):
        command = await asyncio.to_thread(send, command_topics, command_id="while-down")
        for _ in range(100):
            if ran:
                break
            await asyncio.sleep(0.1)
        assert ran == ["while-down"]
        await ingest.stop(grace_s=0)
        release.set()
        await asyncio.sleep(1.0)  # the outcome is spooled, nothing listens
        await start_command_ingest(ingest={"listen_address": address})
        histories = await wait_for_states(command_topics, ["while-down"], {"EXECUTED"})
    records = histories[command.command_id].records
    assert [r.result for r in records if state_name(r.state) == "EXECUTED"] == [b"late"]


async def test_offline_gateway_gets_every_command_in_order_when_it_connects(
    command_topics, start_command_ingest, tmp_path
):
    ingest = await start_command_ingest()
    sent = []
    for i in range(12):  # two devices, interleaved, while no gateway is connected
        device = f"acme-00{1 + i % 2}"
        sent.append(
            await asyncio.to_thread(send, command_topics, device=device, command_id=f"o-{i}")
        )
    await asyncio.sleep(1.0)
    handler = Recorder()
    async with running_gateway(f"127.0.0.1:{ingest.port}", tmp_path / "spool.db", handler):
        await wait_for_states(command_topics, [c.command_id for c in sent], {"EXECUTED"})
    for device in ("acme-001", "acme-002"):
        assert [c.command_id for c in handler.ran if c.device_id == device] == [
            c.command_id for c in sent if c.device_id == device
        ]


async def test_expired_command_is_never_run(command_topics, start_command_ingest, tmp_path):
    ingest = await start_command_ingest()
    doomed = await asyncio.to_thread(send, command_topics, ttl_s=0.5)
    await asyncio.sleep(1.5)
    handler = Recorder()
    async with running_gateway(f"127.0.0.1:{ingest.port}", tmp_path / "spool.db", handler):
        fresh = await asyncio.to_thread(send, command_topics)
        histories = await wait_for_states(command_topics, [fresh.command_id], {"EXECUTED"})
    assert state_name(histories[doomed.command_id].current.state) == "EXPIRED"
    assert [c.command_id for c in handler.ran] == [fresh.command_id]


async def test_duplicate_command_id_runs_once(command_topics, start_command_ingest, tmp_path):
    ingest = await start_command_ingest()
    handler = Recorder()
    async with running_gateway(
        f"127.0.0.1:{ingest.port}", tmp_path / "spool.db", handler
    ) as client:
        first = await asyncio.to_thread(send, command_topics, command_id="dup", payload=b"1")
        await wait_for_states(command_topics, ["dup"], {"EXECUTED"})
        await asyncio.to_thread(send, command_topics, command_id="dup", payload=b"2")
        # Delivered twice anyway (a redelivery after a lost ack): stored and run once.
        assert client._receiver is not None
        assert await asyncio.to_thread(client._receiver.store, first) is False
        last = await asyncio.to_thread(send, command_topics, command_id="after-dup")
        await wait_for_states(command_topics, [last.command_id], {"EXECUTED"})
    assert [c.command_id for c in handler.ran] == ["dup", "after-dup"]


async def test_other_tenants_gateway_never_gets_the_command(
    command_topics, start_command_ingest, tmp_path
):
    ingest = await start_command_ingest()
    target = f"127.0.0.1:{ingest.port}"
    globex, acme = Recorder(), Recorder()
    async with running_gateway(target, tmp_path / "globex.db", globex, gateway="gw-b"):
        command = await asyncio.to_thread(send, command_topics, command_id="acme-only")
        await asyncio.sleep(2.0)
        assert globex.ran == []
        async with running_gateway(target, tmp_path / "acme.db", acme):
            await wait_for_states(command_topics, [command.command_id], {"EXECUTED"})
    assert [c.command_id for c in acme.ran] == ["acme-only"] and globex.ran == []


async def test_replica_stopped_without_grace_loses_nothing(
    command_topics, start_command_ingest, tmp_path
):
    first = await start_command_ingest()
    second = await start_command_ingest()
    target = f"ipv4:127.0.0.1:{first.port},127.0.0.1:{second.port}"
    handler = Recorder()
    async with running_gateway(target, tmp_path / "spool.db", handler):
        before = [
            await asyncio.to_thread(send, command_topics, command_id=f"r-{i}") for i in range(3)
        ]
        await wait_for_states(command_topics, [c.command_id for c in before], {"EXECUTED"})
        await first.stop(grace_s=0)  # its streams die; the gateway reconnects to the other
        after = [
            await asyncio.to_thread(send, command_topics, command_id=f"r-{i}") for i in range(3, 8)
        ]
        await wait_for_states(command_topics, [c.command_id for c in after], {"EXECUTED"})
    assert [c.command_id for c in handler.ran] == [f"r-{i}" for i in range(8)]


async def test_a_full_spool_acknowledges_nothing_and_loses_nothing(
    command_topics, start_command_ingest, tmp_path
):
    from headwater.gateway import GatewayClient, GatewayConfig, Spool, SpoolLimits
    from tests.support.ingest import TOKENS

    ingest = await start_command_ingest()
    assert ingest.commands is not None
    handler = Recorder()
    config = GatewayConfig(
        target=f"127.0.0.1:{ingest.port}", token=TOKENS["gw-a"], backoff_initial_s=0.05
    )
    # Too small for even one report: storing a command (with its DELIVERED) is refused.
    limits = SpoolLimits(max_bytes=16, when_full="refuse")
    with Spool(tmp_path / "full.db", limits) as spool:
        async with GatewayClient(spool, config, commands=handler) as client:
            stop = asyncio.Event()
            running = asyncio.create_task(client.run(stop))
            command = await asyncio.to_thread(send, command_topics, command_id="no-room")
            # The command reached the gateway and its spool refused it: then nothing changes.
            refused = lambda: spool.stats().counters.get("refused", 0) >= 1  # noqa: E731
            await until(refused, 60, "the full spool refusing the command")
            await asyncio.sleep(2.0)  # a window for a wrong acknowledgement to show
            assert not running.done()  # the client keeps running
            assert handler.ran == []
            waiting = ingest.commands.book.waiting(("acme", command.device_id))
            assert [e.command.command_id for e in waiting] == ["no-room"]  # never acknowledged
            stop.set()
            await asyncio.wait_for(running, 15)
    # A gateway with room gets it: nothing was lost.
    async with running_gateway(f"127.0.0.1:{ingest.port}", tmp_path / "roomy.db", handler):
        await wait_for_states(command_topics, ["no-room"], {"EXECUTED"})
    assert [c.command_id for c in handler.ran] == ["no-room"]
