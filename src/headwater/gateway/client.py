"""The gateway client: spool a device message, and send what the spool holds until stopped.

Enqueueing only writes to the spool (and wakes the senders), so a device's reading is
safe on disk before anything touches the network; one :class:`EndpointSender` per
endpoint (telemetry, alarms) sends in the background and deletes each message only after
its OK. See docs/gateway.md for the guarantees.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping

from headwater.endpoints import COMMAND_STATUS
from headwater.gateway.answers import DeliveryReport
from headwater.gateway.channel import create_channel
from headwater.gateway.commands import CommandHandler, CommandReceiver, IdempotentCommands
from headwater.gateway.config import GatewayConfig, TlsConfig
from headwater.gateway.errors import CallFailedError
from headwater.gateway.metrics import GatewayMetrics
from headwater.gateway.records import ENDPOINTS, Enqueued, NewMessage, WhenFull
from headwater.gateway.sender import EndpointSender
from headwater.gateway.spool import Spool

__all__ = ["CallFailedError", "DeliveryReport", "GatewayClient", "GatewayConfig", "TlsConfig"]


class GatewayClient:
    """Drains a spool into the ingest service (see the module docstring).

    The channel is created here but connects on first use, so building a client does no
    I/O; :meth:`close` (or ``async with``) releases it.
    """

    def __init__(
        self,
        spool: Spool,
        config: GatewayConfig,
        on_outcome: Callable[[DeliveryReport], None] | None = None,
        metrics: GatewayMetrics | None = None,
        commands: CommandHandler | None = None,
        idempotent_commands: IdempotentCommands = False,
    ) -> None:
        """Send ``spool``'s messages as ``config`` says.

        Args:
            spool: the outbox to drain; it stays the caller's to close.
            config: where and how to send.
            on_outcome: called (on the event loop) with every message's result: delivered
                with its partition and offset, retry, or rejected.
            metrics: the instruments; default: on the global meter provider.
            commands: the handler of commands from the cloud (``async def handle(command)
                -> result bytes``); None: this gateway takes no commands. See
                docs/commands.md.
            idempotent_commands: the command names whose handler may run a command again
                after an interruption (True: all). Others, interrupted, end FAILED
                INTERRUPTED instead of running twice.
        """
        self.spool = spool
        self.config = config
        self._channel = create_channel(config)
        metrics = metrics or GatewayMetrics(spool)
        self._wake = {ep: asyncio.Event() for ep in ENDPOINTS}
        self._senders = [
            EndpointSender(ep, spool, self._channel, config, metrics, on_outcome, self._wake[ep])
            for ep in ENDPOINTS
        ]
        self._receiver = (
            CommandReceiver(
                spool,
                self._channel,
                config,
                commands,
                lambda: self.notify(COMMAND_STATUS),
                idempotent=idempotent_commands,
            )
            if commands is not None
            else None
        )
        self._running = False

    async def close(self) -> None:
        """Close the channel (idempotent); the spool stays open: it is the caller's."""
        await self._channel.close()

    async def __aenter__(self) -> GatewayClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def notify(self, endpoint: str | None = None) -> None:
        """Wake the senders: something was spooled behind the client's back."""
        for ep, event in self._wake.items():
            if endpoint in (None, ep):
                event.set()

    async def enqueue(
        self,
        endpoint: str,
        device_id: str,
        content_type: str,
        payload: bytes,
        device_time_ms: int | None = None,
        attributes: Mapping[str, str] | None = None,
    ) -> Enqueued:
        """Spool one message (see :meth:`Spool.enqueue`) and wake its sender.

        Returns what was spooled (``.message_id``) and what was dropped to make room.

        Raises:
            SpoolFullError: policy ``refuse`` and no room.
        """
        new = NewMessage(device_id, content_type, payload, device_time_ms, attributes)
        return await self.enqueue_many(endpoint, [new])

    async def enqueue_many(
        self, endpoint: str, messages: Iterable[NewMessage], when_full: WhenFull | None = None
    ) -> Enqueued:
        """Spool messages in one transaction (one disk flush) and wake the sender.

        ``when_full`` overrides the spool's policy for this call (see :meth:`Spool.enqueue_many`).
        """
        batch = list(messages)
        enqueued = await asyncio.to_thread(self.spool.enqueue_many, endpoint, batch, when_full)
        self._wake[endpoint].set()
        return enqueued

    async def run(self, stop: asyncio.Event) -> None:
        """Send until ``stop`` is set; then finish the frames in flight and return.

        Raises:
            RuntimeError: the client is running already (two senders would send every
                message twice).
        """
        if self._running:
            raise RuntimeError("this GatewayClient is running already")
        self._running = True
        try:
            runs = [s.run(stop) for s in self._senders]
            if self._receiver is not None:
                runs.append(self._receiver.run(stop))
            await asyncio.gather(*runs)
        finally:
            self._running = False

    async def drain(self, within_s: float) -> bool:
        """Wait until the spool is empty (or ``within_s`` passed); True when empty.

        Sends meanwhile: through :meth:`run` if it is running, else with a run of its own
        that stops when this returns (for batch jobs, shutdown and tests).
        """
        stop = asyncio.Event()
        runner = None if self._running else asyncio.create_task(self.run(stop))
        deadline = time.monotonic() + within_s
        try:
            while time.monotonic() < deadline:
                if self.spool.depth == 0:
                    return True
                if runner is not None and runner.done():
                    runner.result()
                await asyncio.sleep(0.05)
            return False
        finally:
            stop.set()
            if runner is not None:
                await runner
