"""Where and how a gateway sends: one frozen object, from code or from the environment.

Secrets (the bearer token, the client key) are kept out of ``repr`` so a logged config
never leaks them.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Self

from headwater.runtime.settings import Settings, setting

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
class TlsFiles(Settings):
    """The TLS files of ``HEADWATER_GATEWAY_TLS_*``, read into a :class:`TlsConfig`."""

    env_prefix: ClassVar[str] = "HEADWATER_GATEWAY_"

    tls: bool = setting(False, help="TLS with the system's roots (implied by any TLS file)")
    tls_ca_file: str = setting("", help="CA bundle (PEM) the server certificate must chain to")
    tls_cert_file: str = setting("", help="client certificate chain (PEM): mTLS, CN = gateway id")
    tls_key_file: str = setting("", help="the client certificate's key (PEM)")
    tls_server_name: str = setting(
        "", help="the name the server certificate is issued for, when not the target's host"
    )

    def config(self) -> TlsConfig | None:
        """Return the TLS configuration, or None for plaintext (no file and ``tls`` off)."""
        ca, cert, key = self.tls_ca_file, self.tls_cert_file, self.tls_key_file
        if not (ca or cert or key or self.tls):
            return None
        return TlsConfig(
            root_certificates=_read(ca),
            client_certificate_chain=_read(cert),
            client_private_key=_read(key),
            server_name=self.tls_server_name or None,
        )


@dataclass(frozen=True)
class GatewayConfig(Settings):
    """Where and how to send (the table in docs/gateway.md is generated from these fields)."""

    env_prefix: ClassVar[str] = "HEADWATER_GATEWAY_"

    target: str = setting(
        help="`host:port`, or `dns:///host:port` to balance over every address", flag=True
    )
    token: str | None = setting(
        None,
        secret=True,
        help="bearer token (`authorization: Bearer …`); the server's tokens file holds its SHA-256",
    )
    #: TLS to the ingest service (``HEADWATER_GATEWAY_TLS_*``, see :class:`TlsFiles`).
    tls: TlsConfig | None = None
    use_stream: bool = setting(True, help="one stream per endpoint; `false`: batch calls")
    frame_messages: int = setting(
        100,
        minimum=1,
        flag=True,
        help=f"messages per stream frame or batch call (1 to {MAX_FRAME_MESSAGES}, the server's "
        "ceiling)",
    )
    frame_max_bytes: int = setting(
        1024 * 1024,
        env="",
        unit="bytes",
        help="envelope bytes per frame, below the server's 4 MiB request limit (one bigger "
        "message still goes alone)",
    )
    window_frames: int = setting(4, env="", help="frames in flight per stream, unanswered")
    call_timeout_s: float = setting(
        10.0, minimum=0.1, unit="s", help="deadline of a batch call, and of each frame's answer"
    )
    backoff_initial_s: float = setting(
        0.2,
        env="",
        unit="s",
        help="first retry delay; exponential with full jitter (cut short when ingest is "
        "reachable again)",
    )
    backoff_max_s: float = setting(30.0, env="", unit="s", help="longest retry delay")
    idle_poll_s: float = setting(
        0.5,
        env="",
        unit="s",
        help="how often an idle sender looks for due retries (enqueues wake it at once)",
    )
    command_stop_grace_s: float = setting(
        10.0,
        minimum=0.0,
        unit="s",
        help="on a clean stop, how long a running command handler may take to finish; one "
        "still running then is cancelled and ends `FAILED` `INTERRUPTED` (docs/commands.md)",
    )
    command_retention_s: float = setting(
        86400.0,
        minimum=0.0,
        unit="s",
        help="how long finished commands stay in the spool (a redelivery of their id within "
        "it is recognised and not run); their bytes count in the spool's limit",
    )

    def __post_init__(self) -> None:
        if not 1 <= self.frame_messages <= MAX_FRAME_MESSAGES:
            raise ValueError(f"frame_messages must be 1 to {MAX_FRAME_MESSAGES}")
        if self.window_frames < 1 or self.frame_max_bytes < 1:
            raise ValueError("window_frames and frame_max_bytes must be at least 1")
        if self.call_timeout_s <= 0 or self.backoff_initial_s <= 0:
            raise ValueError("call_timeout_s and backoff_initial_s must be positive")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **given: Any) -> Self:
        """Read ``HEADWATER_GATEWAY_*`` (see docs/gateway.md); raise SettingError if bad."""
        env = os.environ if env is None else env
        return super().from_env(env, **({"tls": TlsFiles.from_env(env).config()} | given))

    @classmethod
    def from_args(
        cls, args: argparse.Namespace, env: Mapping[str, str] | None = None, **given: Any
    ) -> Self:
        """Read as :meth:`from_env`; ``--target`` and ``--frame-messages`` win."""
        env = os.environ if env is None else env
        return super().from_args(args, env, **({"tls": TlsFiles.from_env(env).config()} | given))


def _read(path: str) -> bytes | None:
    return Path(path).read_bytes() if path else None
