"""The gRPC channel to the ingest service: balancing, keepalive, TLS and mTLS.

Balancing is client-side: with a ``dns:///`` target that resolves to every ingest replica
(a headless Service), the ``round_robin`` policy keeps a connection to each address and
spreads calls and streams over them; a replica that drains ends its streams and they
reconnect to the others. The policy comes from the service config, the documented way to
choose one (the ``grpc.lb_policy_name`` argument is deprecated in gRPC core).

While ingest is unreachable the channel keeps trying to connect on its own, at most
:data:`RECONNECT_BACKOFF_MAX_S` apart, and :func:`sleep_unless` ends a retry's backoff as
soon as it connects: a sender backed off to its longest delay during an outage resends
within seconds of ingest's return, not after that delay.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import grpc

from headwater.gateway.config import GatewayConfig

SERVICE_CONFIG = json.dumps({"loadBalancingConfig": [{"round_robin": {}}]})
#: The longest gap between gRPC's attempts to connect. An attempt is one TCP (and TLS)
#: handshake, cheap beside a retried call; the senders' own backoff (up to
#: ``backoff_max_s``) spaces the calls.
RECONNECT_BACKOFF_MAX_S = 5.0


def channel_options(config: GatewayConfig) -> list[tuple[str, Any]]:
    """Return the channel arguments for ``config``."""
    options: list[tuple[str, Any]] = [
        ("grpc.service_config", SERVICE_CONFIG),
        # Long-lived streams: notice a dead peer (NAT timeouts on field links). gRPC sends
        # at most two pings without data, so an idle stream is not mistaken for abuse.
        ("grpc.keepalive_time_ms", 30_000),
        ("grpc.keepalive_timeout_ms", 10_000),
        # Reconnect soon after the link is back: gRPC's own default backs off up to 120 s.
        ("grpc.initial_reconnect_backoff_ms", 500),
        ("grpc.max_reconnect_backoff_ms", int(RECONNECT_BACKOFF_MAX_S * 1000)),
        # Frames are bounded by frame_max_bytes; room for one message over it.
        ("grpc.max_send_message_length", config.frame_max_bytes + 512 * 1024),
    ]
    if config.tls is not None and config.tls.server_name:
        options.append(("grpc.ssl_target_name_override", config.tls.server_name))
    return options


def create_channel(config: GatewayConfig) -> grpc.aio.Channel:
    """Return a channel to ``config.target`` (no I/O: gRPC connects on the first call)."""
    options = channel_options(config)
    tls = config.tls
    if tls is None:
        return grpc.aio.insecure_channel(config.target, options=options)
    credentials = grpc.ssl_channel_credentials(
        tls.root_certificates, tls.client_private_key, tls.client_certificate_chain
    )
    return grpc.aio.secure_channel(config.target, credentials, options=options)


async def until_connected(channel: grpc.aio.Channel) -> None:
    """Return once ``channel`` is connected (READY), asking it to connect meanwhile."""
    state = channel.get_state(try_to_connect=True)
    while state != grpc.ChannelConnectivity.READY:
        await channel.wait_for_state_change(state)
        state = channel.get_state(try_to_connect=True)


async def sleep_unless(
    stop: asyncio.Event, seconds: float, channel: grpc.aio.Channel | None = None
) -> None:
    """Sleep ``seconds``, or less if ``stop`` is set or ``channel``, not connected now, connects.

    A channel connected already (the failure was the server's answer: overload, bad
    credentials) does not shorten the sleep.
    """
    waiters: set[asyncio.Future[Any]] = {asyncio.ensure_future(stop.wait())}
    if channel is not None and channel.get_state() != grpc.ChannelConnectivity.READY:
        waiters.add(asyncio.ensure_future(until_connected(channel)))
    _, pending = await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    for waiter in pending:
        waiter.cancel()
