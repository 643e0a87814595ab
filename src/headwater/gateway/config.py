"""Where and how a gateway sends: one frozen object, from code or from the environment.

Secrets (the bearer token, the client key) are kept out of ``repr`` so a logged config
never leaks them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from headwater.runtime.env import SettingError, env_bool, env_float, env_int, env_str

#: The ingest service's ceiling on messages per request (HEADWATER_INGEST_MAX_BATCH_MESSAGES).
MAX_FRAME_MESSAGES = 500


@dataclass(frozen=True)
class TlsConfig:
    """TLS to the ingest service; a client certificate turns it into mTLS (CN = gateway id)."""

    #: CA bundle (PEM) the server certificate must chain to; None: the system roots.
    root_certificates: bytes | None = None
    client_certificate_chain: bytes | None = None
    client_private_key: bytes | None = field(default=None, repr=False)
    #: The name the server certificate is issued for, when it differs from the target host.
    server_name: str | None = None

    def __post_init__(self) -> None:
        if (self.client_certificate_chain is None) != (self.client_private_key is None):
            raise ValueError("mTLS needs both the client certificate chain and its private key")


@dataclass(frozen=True)
class GatewayConfig:
    """Where and how to send (every field is documented in docs/gateway.md)."""

    #: "host:port", or "dns:///ingest.example.com:50051" to balance over every address.
    target: str
    #: Bearer token; the server's tokens file holds its SHA-256.
    token: str | None = field(default=None, repr=False)
    tls: TlsConfig | None = None
    use_stream: bool = True
    #: Messages per stream frame or batch call (the server takes at most 500).
    frame_messages: int = 100
    #: Envelope bytes per frame; below the server's 4 MiB request limit and its budget.
    frame_max_bytes: int = 1024 * 1024
    #: Frames in flight per stream, unanswered.
    window_frames: int = 4
    #: Deadline of a batch call, and of each stream frame's answer.
    call_timeout_s: float = 10.0
    backoff_initial_s: float = 0.2
    backoff_max_s: float = 30.0
    #: How often an idle sender looks for new or due messages (enqueues also wake it).
    idle_poll_s: float = 0.5

    def __post_init__(self) -> None:
        if not 1 <= self.frame_messages <= MAX_FRAME_MESSAGES:
            raise ValueError(f"frame_messages must be 1 to {MAX_FRAME_MESSAGES}")
        if self.window_frames < 1 or self.frame_max_bytes < 1:
            raise ValueError("window_frames and frame_max_bytes must be at least 1")
        if self.call_timeout_s <= 0 or self.backoff_initial_s <= 0:
            raise ValueError("call_timeout_s and backoff_initial_s must be positive")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> GatewayConfig:
        """Read ``HEADWATER_GATEWAY_*`` (see docs/gateway.md); raise SettingError if bad."""
        env = os.environ if env is None else env
        target = env_str(env, "HEADWATER_GATEWAY_TARGET", "")
        if not target:
            raise SettingError("HEADWATER_GATEWAY_TARGET is not set (host:port or dns:///...)")
        ca, cert, key = (
            env_str(env, f"HEADWATER_GATEWAY_TLS_{n}_FILE", "") for n in ("CA", "CERT", "KEY")
        )
        tls = None
        if ca or cert or key or env_bool(env, "HEADWATER_GATEWAY_TLS", False):
            tls = TlsConfig(
                root_certificates=_read(ca),
                client_certificate_chain=_read(cert),
                client_private_key=_read(key),
                server_name=env_str(env, "HEADWATER_GATEWAY_TLS_SERVER_NAME", "") or None,
            )
        return cls(
            target=target,
            token=env_str(env, "HEADWATER_GATEWAY_TOKEN", "") or None,
            tls=tls,
            use_stream=env_bool(env, "HEADWATER_GATEWAY_USE_STREAM", cls.use_stream),
            frame_messages=env_int(env, "HEADWATER_GATEWAY_FRAME_MESSAGES", cls.frame_messages, 1),
            call_timeout_s=env_float(
                env, "HEADWATER_GATEWAY_CALL_TIMEOUT_SECONDS", cls.call_timeout_s, 0.1
            ),
        )


def _read(path: str) -> bytes | None:
    return Path(path).read_bytes() if path else None
