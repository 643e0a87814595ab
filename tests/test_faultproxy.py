"""The fault proxy itself, against a local echo server: forward, cut, stall, heal."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator

import pytest

from tests.support.faultproxy import FaultProxy

#: Long enough for a forwarded echo on a loaded machine, short enough to keep tests quick.
SILENCE_S = 0.5
ANSWER_S = 10.0


@pytest.fixture
async def echo_port() -> AsyncIterator[int]:
    """An echo server on the test's loop; the proxy's upstream."""
    writers: set[asyncio.StreamWriter] = set()

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.add(writer)
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()
            writers.discard(writer)

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1]
    server.close()
    for writer in list(writers):
        writer.transport.abort()
    await server.wait_closed()


@pytest.fixture
def proxy(echo_port: int):
    with FaultProxy(target_port=echo_port) as running:
        yield running


async def connect(proxy: FaultProxy) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", proxy.port)


async def roundtrip(reader, writer, data: bytes) -> bytes:
    writer.write(data)
    await writer.drain()
    return await asyncio.wait_for(reader.readexactly(len(data)), ANSWER_S)


async def assert_silent(reader: asyncio.StreamReader) -> None:
    """Nothing arrives for a while, and the connection did not end either."""
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(reader.read(1), SILENCE_S)


async def assert_ended(reader: asyncio.StreamReader) -> None:
    """The connection ends (EOF or reset) promptly."""
    with contextlib.suppress(ConnectionError):
        assert await asyncio.wait_for(reader.read(65536), ANSWER_S) == b""


async def close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(ConnectionError):
        await writer.wait_closed()


async def test_forwards_both_ways_and_counts(proxy):
    reader, writer = await connect(proxy)
    assert await roundtrip(reader, writer, b"hello") == b"hello"
    await proxy.until(lambda p: p.open_connections == 1, ANSWER_S)
    assert (proxy.bytes_up, proxy.bytes_down, proxy.accepted) == (5, 5, 1)
    await close(writer)
    await proxy.until(lambda p: p.open_connections == 0, ANSWER_S)


async def test_large_transfer_arrives_intact_under_backpressure(proxy):
    data = os.urandom(16 * 1024 * 1024)
    reader, writer = await connect(proxy)

    async def send() -> None:
        for i in range(0, len(data), 1 << 20):
            writer.write(data[i : i + (1 << 20)])
            await writer.drain()

    sender = asyncio.create_task(send())
    received = await asyncio.wait_for(reader.readexactly(len(data)), 60)
    await sender
    assert received == data
    assert proxy.bytes_up == proxy.bytes_down == len(data)
    await close(writer)


async def test_cut_resets_open_connections_and_refuses_new_ones_until_healed(proxy):
    reader, writer = await connect(proxy)
    assert await roundtrip(reader, writer, b"before") == b"before"
    proxy.cut()
    assert proxy.open_connections == 0
    await assert_ended(reader)
    with pytest.raises(ConnectionRefusedError):
        await connect(proxy)
    proxy.heal()
    reader2, writer2 = await connect(proxy)
    assert await roundtrip(reader2, writer2, b"after") == b"after"
    await close(writer)
    await close(writer2)


async def test_stall_holds_every_byte_without_closing_and_heal_delivers_them(proxy):
    reader, writer = await connect(proxy)
    assert await roundtrip(reader, writer, b"x") == b"x"
    proxy.stall()
    writer.write(b"held")
    await writer.drain()
    await assert_silent(reader)
    # A new connection is accepted (the port answers) but is silent as well.
    reader2, writer2 = await connect(proxy)
    writer2.write(b"new")
    await writer2.drain()
    await assert_silent(reader2)
    assert proxy.open_connections == 2
    proxy.heal()
    assert await asyncio.wait_for(reader.readexactly(4), ANSWER_S) == b"held"
    assert await asyncio.wait_for(reader2.readexactly(3), ANSWER_S) == b"new"
    await close(writer)
    await close(writer2)


async def test_stall_then_cut_then_heal(proxy):
    reader, writer = await connect(proxy)
    proxy.stall()
    writer.write(b"lost")
    await writer.drain()
    proxy.cut()
    await assert_ended(reader)
    proxy.heal()
    reader2, writer2 = await connect(proxy)
    assert await roundtrip(reader2, writer2, b"ok") == b"ok"
    await close(writer)
    await close(writer2)


async def test_a_missing_upstream_ends_the_client_connection():
    from headwater_dev.devstack.ports import free_port

    with FaultProxy(target_port=free_port()) as proxy:
        reader, writer = await connect(proxy)
        await assert_ended(reader)
        await close(writer)
        await proxy.until(lambda p: p.open_connections == 0, ANSWER_S)


async def test_stop_closes_everything_and_is_idempotent(echo_port):
    proxy = FaultProxy(target_port=echo_port).start()
    reader, writer = await connect(proxy)
    assert await roundtrip(reader, writer, b"x") == b"x"
    proxy.stop()
    proxy.stop()
    await assert_ended(reader)
    with pytest.raises(ConnectionRefusedError):
        await connect(proxy)
    await close(writer)


def test_only_loopback_targets_are_allowed():
    with pytest.raises(ValueError, match="loopback"):
        FaultProxy(target_port=9092, target_host="10.0.0.1")
