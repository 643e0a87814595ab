"""A steady load through the gateway library: readings spooled at a rate, sent by the client.

One :class:`~headwater.gateway.client.GatewayClient` drains a durable spool (SQLite,
``synchronous=FULL``, the library's defaults: one stream, frames of 100, window 4), as
``headwater bench gateway`` uses it, while readings of 100 devices are spooled in batches
every :data:`TICK_S` at ``rate`` per second, open loop: a stalled sender does not slow the
devices, the spool holds the backlog. The load runs on its own event loop in a thread, so
the phases provoke faults with plain blocking calls and Ctrl-C reaches them at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from pathlib import Path

from headwater.gateway.client import GatewayClient, GatewayConfig
from headwater.gateway.spool import Spool
from headwater_dev.bench.faults.ledger import OkLedger
from headwater_dev.bench.gateway_bench import make_readings

#: How often readings are spooled (each time what the rate owes since the start).
TICK_S = 0.02
#: The longest wait for the first OK once the load starts (ingest connecting to Kafka).
FIRST_OK_WITHIN_S = 60.0


class SteadyLoad:
    """Spool ``rate`` readings per second and send them to ``target`` until stopped."""

    def __init__(self, target: str, rate: float, payload: int, folder: Path) -> None:
        self.ledger = OkLedger()
        self.spooled = 0
        self.max_depth = 0
        self.depth = 0
        self._target, self._rate, self._folder = target, rate, folder
        self._readings = make_readings(100, payload)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._feeding: asyncio.Event | None = None
        self._ready = threading.Event()
        self._drain_within_s = 0.0
        self.drained = False
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="faults-load", daemon=True)
        self.started_at = self.stopped_at = 0.0

    def start(self) -> SteadyLoad:
        """Start spooling and sending; return once the first message is answered OK.

        Raises:
            TimeoutError: no OK within :data:`FIRST_OK_WITHIN_S`.
        """
        self._thread.start()
        self._ready.wait(30)
        deadline = time.monotonic() + FIRST_OK_WITHIN_S
        while self.ledger.oks == 0:
            self._raise_if_failed()
            if time.monotonic() > deadline:
                raise TimeoutError(f"no OK from ingest within {FIRST_OK_WITHIN_S:.0f}s")
            time.sleep(0.1)
        return self

    def stop(self, drain_within_s: float) -> bool:
        """Stop spooling, wait until the spool is empty (at most ``drain_within_s``); True if so."""
        self._drain_within_s = drain_within_s
        if self._loop is not None and self._feeding is not None:
            with contextlib.suppress(RuntimeError):  # the loop ended already (it failed)
                self._loop.call_soon_threadsafe(self._feeding.set)
        self._thread.join(drain_within_s + 30)
        self._raise_if_failed()
        return self.drained

    def offered_per_s(self) -> float:
        """Readings spooled per second while spooling."""
        end = self.stopped_at or time.monotonic()
        return self.spooled / (end - self.started_at) if end > self.started_at else 0.0

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise RuntimeError(f"the gateway load failed: {self._error}") from self._error

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # handed to the phase's thread, which reports it
            self._error = exc

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._feeding = asyncio.Event()
        self._ready.set()
        with Spool(self._folder / "spool.db") as spool:
            config = GatewayConfig(target=self._target)
            async with GatewayClient(spool, config, self.ledger.record) as client:
                sending = asyncio.Event()
                sender = asyncio.create_task(client.run(sending))
                try:
                    await self._feed(client, spool, self._feeding)
                    self.drained = await client.drain(self._drain_within_s)
                finally:
                    sending.set()
                    await sender

    async def _feed(self, client: GatewayClient, spool: Spool, stop: asyncio.Event) -> None:
        """Spool what the rate owes every tick until ``stop`` is set."""
        n = len(self._readings)
        self.started_at = time.monotonic()
        while not stop.is_set():
            due = int(self._rate * (time.monotonic() - self.started_at)) - self.spooled
            if due > 0:
                first = self.spooled % n
                batch = [self._readings[(first + k) % n] for k in range(due)]
                await client.enqueue_many("telemetry", batch)
                self.spooled += due
            self.depth = spool.depth
            self.max_depth = max(self.max_depth, self.depth)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), TICK_S)
        self.stopped_at = time.monotonic()
