"""The gRPC channel to the ingest service: balancing, keepalive, TLS and mTLS.

Balancing is client-side: with a ``dns:///`` target that resolves to every ingest replica
(a headless Service), the ``round_robin`` policy keeps a connection to each address and
spreads calls and streams over them; a replica that drains ends its streams and they
reconnect to the others. The policy comes from the service config, the documented way to
choose one (the ``grpc.lb_policy_name`` argument is deprecated in gRPC core).
"""

from __future__ import annotations

import json
from typing import Any

import grpc

from headwater.gateway.config import GatewayConfig

SERVICE_CONFIG = json.dumps({"loadBalancingConfig": [{"round_robin": {}}]})


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
        ("grpc.max_reconnect_backoff_ms", int(max(1.0, config.backoff_max_s) * 1000)),
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
