"""The bench's sources in processes of their own: they can offer more than one core takes.

MQTT publishers (several processes, one aiomqtt client each) and asyncua's OPC UA server
with the writer of its data changes.

Every child gets ready (imports, connects, builds its address space) before the phase's
clock starts; then all of them are told to go at once. Children are spawned (a clean
interpreter: no event loop or threads inherited) and killed if they outlive their phase.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import multiprocessing as mp
import queue
import time
from collections.abc import AsyncIterator, Callable
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

_SPAWN = mp.get_context("spawn")
#: QoS 1 publishes each publisher keeps unacknowledged.
IN_FLIGHT = 500
#: A child's start: a Python interpreter, its imports, a connection or an address space.
READY_S = 120.0
#: A child's own work, once told to go, may take the phase's whole bound.
WORK_S = 900.0


def quiet(name: str) -> logging.Logger:
    """A logger that says errors only.

    aiomqtt warns for every publish waiting on the in-flight window, asyncua that a server
    without security has none: a bench's normal state.
    """
    logger = logging.getLogger(name)
    logger.setLevel(logging.ERROR)
    return logger


async def _receive(
    receive: Callable[[float], Any], children: list[BaseProcess], within_s: float, what: str
) -> Any:
    """The next answer of the children, or RuntimeError when one died or none came in time."""
    deadline = time.monotonic() + within_s
    while True:
        with contextlib.suppress(queue.Empty, TimeoutError):
            return await asyncio.to_thread(receive, 0.5)
        failed = [c.exitcode for c in children if c.exitcode not in (None, 0)]
        if failed:
            raise RuntimeError(f"a source process failed (exit {failed[0]}) before {what}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the source processes did not report {what} in {within_s:.0f}s")


def _from(answers: Any) -> Callable[[float], Any]:
    """Take the next answer from the queue ``answers``, waiting at most the seconds given."""
    return lambda timeout_s: answers.get(timeout=timeout_s)


def _end(children: list[BaseProcess]) -> None:
    for child in children:
        child.join(10)
        if child.is_alive():
            child.kill()
            child.join(10)


# --- MQTT -------------------------------------------------------------------------------


def _publisher_main(port: int, first: int, count: int, ready: Any, go: Any, done: Any) -> None:
    asyncio.run(_publisher(port, first, count, ready, go, done))


async def _publisher(port: int, first: int, count: int, ready: Any, go: Any, done: Any) -> None:
    """Publish messages ``first`` .. ``first + count - 1`` once told to go; report the seconds."""
    import aiomqtt

    payload = json.dumps({"temp_c": 21.5, "pad": "x" * 64}).encode()
    client = aiomqtt.Client(
        "127.0.0.1", port, max_inflight_messages=IN_FLIGHT, logger=quiet("bench.publisher")
    )
    async with client as publisher:
        ready.put(first)
        await asyncio.to_thread(go.wait)
        started = time.perf_counter()
        for chunk in range(first, first + count, IN_FLIGHT):
            await asyncio.gather(*(
                publisher.publish(f"bench/{i % 100:03d}", payload, qos=1)
                for i in range(chunk, min(first + count, chunk + IN_FLIGHT))
            ))  # fmt: skip
        done.put(time.perf_counter() - started)


class MqttPublishers:
    """``processes`` publishers, connected to Mosquitto on ``port``, sharing ``values``."""

    def __init__(self, children: list[BaseProcess], ready: Any, go: Any, done: Any) -> None:
        self._children, self._ready, self._go, self._done = children, ready, go, done

    async def go(self) -> float:
        """Let them publish; the seconds until the broker acknowledged (PUBACK) the last."""
        started = time.perf_counter()
        self._go.set()
        for _ in self._children:
            await _receive(_from(self._done), self._children, WORK_S, "their last PUBACK")
        return time.perf_counter() - started


@contextlib.asynccontextmanager
async def mqtt_publishers(port: int, values: int, processes: int) -> AsyncIterator[MqttPublishers]:
    """Start the publishers and wait until each is connected (the phase's clock not yet)."""
    ready, done, go = _SPAWN.Queue(), _SPAWN.Queue(), _SPAWN.Event()
    share, extra = divmod(values, processes)
    children: list[BaseProcess] = []
    first = 0
    for n in range(processes):
        count = share + (n < extra)
        children.append(_SPAWN.Process(
            target=_publisher_main, args=(port, first, count, ready, go, done), daemon=True
        ))  # fmt: skip
        first += count
    for child in children:
        child.start()
    try:
        for _ in children:
            await _receive(_from(ready), children, READY_S, "connected")
        yield MqttPublishers(children, ready, go, done)
    finally:
        _end(children)


# --- OPC UA -----------------------------------------------------------------------------


def _opcua_main(port: int, items: int, conn: Connection) -> None:
    asyncio.run(_opcua_server(port, items, conn))


async def _opcua_server(port: int, items: int, conn: Connection) -> None:
    """Serve ``items`` Doubles; write rounds of changes when asked, until told to stop."""
    from headwater_dev.edge.opcua_server import PressServer

    quiet("asyncua")
    server = PressServer(port)
    await server.start(variables=items)
    try:
        conn.send(server.url)
        while (command := await asyncio.to_thread(conn.recv)) != "stop":
            _, values, rate = command
            conn.send(await _write_rounds(server.variables, values, rate))
    finally:
        await server.stop()


async def _write_rounds(variables: list[Any], values: int, rate: float) -> float:
    """Write ``values`` changes, one per variable a round, ``rate`` a second at most; seconds."""
    started = time.perf_counter()
    written = 0
    while written < values:
        round_started = time.perf_counter()
        for variable in variables[: values - written]:
            # Never a variable's initial 0.0: an unchanged value is no data change.
            await variable.write_value(float(written + 1))
            written += 1
        # The server shares this loop: between rounds it answers the gateway's publish
        # requests (writing without a pause starves it until the session times out).
        await asyncio.sleep(max(0.0, round_started + len(variables) / rate - time.perf_counter()))
    return time.perf_counter() - started


class OpcUaServer:
    """asyncua's server with ``items`` monitored Doubles (``ns=2;s=V0`` ..), at ``url``."""

    def __init__(self, child: BaseProcess, conn: Connection, url: str, items: int) -> None:
        self._child, self._conn, self.url, self.items = child, conn, url, items

    async def write(self, values: int, rate: float, within_s: float = WORK_S) -> float:
        """Write ``values`` changes over the items, at most ``rate`` a second; the seconds.

        RuntimeError when the writes took longer than ``within_s``.
        """
        self._conn.send(("write", values, rate))
        answer = functools.partial(_answer, self._conn)
        seconds: float = await _receive(answer, [self._child], within_s, "its writes")
        return seconds


def _answer(conn: Connection, timeout_s: float) -> Any:
    """The child's next answer on ``conn``; TimeoutError when none came in ``timeout_s``."""
    if not conn.poll(timeout_s):
        raise TimeoutError
    return conn.recv()


@contextlib.asynccontextmanager
async def opcua_server(port: int, items: int) -> AsyncIterator[OpcUaServer]:
    """Start the server in its own process and wait until it serves."""
    conn, child_conn = _SPAWN.Pipe()
    child = _SPAWN.Process(target=_opcua_main, args=(port, items, child_conn), daemon=True)
    child.start()
    try:
        url = await _receive(functools.partial(_answer, conn), [child], READY_S, "serving")
        yield OpcUaServer(child, conn, url, items)
        conn.send("stop")
    finally:
        _end([child])
