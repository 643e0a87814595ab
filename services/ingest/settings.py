"""Settings of the ingest service, declared once: read from ``HEADWATER_INGEST_*``, flags, docs."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

from headwater.kafka.settings import KafkaSettings
from headwater.runtime.env import SettingError
from headwater.runtime.settings import Renamed, Settings, setting

#: The contract's own ceiling (proto field rules); settings may only lower it.
CONTRACT_MAX_PAYLOAD_BYTES = 262_144
CONTRACT_MAX_BATCH_MESSAGES = 500


#: The gateway library's default frame timeout (``GatewayConfig.call_timeout_s``): stream
#: frames must be answered before it.
GATEWAY_FRAME_TIMEOUT_SECONDS = 10.0

log = logging.getLogger(__name__)

#: The plaintext health-only port when TLS is on and HEADWATER_INGEST_HEALTH_PORT is unset.
DEFAULT_HEALTH_PORT = 8086

#: The produce clients the service can use (``HEADWATER_INGEST_PRODUCER``).
PRODUCERS = ("confluent", "aiokafka")
#: The event loops the service can run on (``HEADWATER_INGEST_EVENT_LOOP``).
EVENT_LOOPS = ("uvloop", "asyncio")


_P = "HEADWATER_INGEST_"


def _from_ms(name: str) -> tuple[Renamed, ...]:
    """The earlier ``_MS`` spelling of a seconds setting, read for one release."""
    return (Renamed(f"{_P}{name}_MS", scale=0.001),)


@dataclass(frozen=True)
class IngestSettings(Settings):
    """Everything the ingest service can be configured with (the README's table)."""

    env_prefix: ClassVar[str] = _P

    listen_address: str = setting("[::]:50051", help="gRPC listen address", flag=True)
    metrics_port: int = setting(
        9464, minimum=0, help="Prometheus scrape port (`/metrics`); `0` turns it off", flag=True
    )
    tokens_file: str = setting(
        "",
        help="YAML file of gateways: id, tenant, `token_sha256`, device patterns, `revoked`; "
        "re-read on change",
        flag=True,
    )
    tls_cert_file: str = setting(
        "", help="server certificate (PEM); with `HEADWATER_INGEST_TLS_KEY_FILE`, or neither"
    )
    tls_key_file: str = setting("", help="the server certificate's key (PEM)")
    tls_client_ca_file: str = setting(
        "",
        help="CA of gateway client certificates: turns on mTLS (certificate CN = gateway id). "
        "The three TLS files are reloaded when they change (new connections get them; open "
        "streams stay)",
    )
    #: None: ``DEFAULT_HEALTH_PORT`` when TLS is on, off without TLS; 0: off.
    health_port: int | None = setting(
        None,
        minimum=0,
        shown=f"({DEFAULT_HEALTH_PORT} with TLS, off without)",
        help="plaintext port serving only `grpc.health.v1` (the same status as the gRPC port), "
        "for probes that cannot speak TLS (the kubelet's); `0` turns it off",
    )
    allow_unauthenticated: bool = setting(
        False,
        help="accept calls without credentials (trusted networks only; logs a warning). One of "
        "tokens, mTLS or this is required",
        flag=True,
    )
    max_payload_bytes: int = setting(
        CONTRACT_MAX_PAYLOAD_BYTES,
        minimum=1,
        unit="bytes",
        help="largest device payload (the contract's ceiling; may only be lowered)",
    )
    max_batch_messages: int = setting(
        CONTRACT_MAX_BATCH_MESSAGES, minimum=1, help="most messages per request or stream frame"
    )
    max_request_bytes: int = setting(
        4 * 1024 * 1024,
        minimum=1024,
        unit="bytes",
        help="largest request; bigger ones get RESOURCE_EXHAUSTED from gRPC",
    )
    # 8 MiB is ~0.7 s of work at this service's measured capacity: overload is shed as
    # RESOURCE_EXHAUSTED instead of queued (64 MiB grew RSS by 267 MB; docs/benchmarks.md).
    max_inflight_bytes: int = setting(
        8 * 1024 * 1024,
        minimum=1024,
        unit="bytes",
        help="request bytes a process holds at once, counted from when the handler reads a "
        "request (before parsing) until Kafka has acked or failed every record made from it; "
        "beyond it calls get RESOURCE_EXHAUSTED with a retry delay, before their body is read "
        "when a request of the usual size would not fit. A publish body being read counts at "
        "`HEADWATER_INGEST_MAX_REQUEST_BYTES` until it is read (a caller cannot train it "
        "smaller), in a room of its own as large as this bound, one body per gateway at a "
        "time; so the ratio of the two is how many bodies are read at once. The producer's "
        "queue limits are derived from it. Per replica: N replicas hold N times it",
    )
    #: Counted by the service itself, so health and reflection are never refused by it.
    max_concurrent_rpcs: int = setting(
        1024,
        minimum=1,
        help="publish calls served at once per process; more get RESOURCE_EXHAUSTED at once "
        "(health and reflection are not counted)",
    )
    #: A separate limit, because a stream is held for hours.
    max_streams: int = setting(
        1024,
        minimum=1,
        help="open streams per process, a separate limit (streams are long-lived: ~512 "
        "gateways with two streams each); more get RESOURCE_EXHAUSTED",
    )
    #: 256 lets a burst of a few hundred calls wait (64 dropped some of a 200-call burst);
    #: memory: up to one request each.
    max_pending_calls: int = setting(
        256,
        minimum=1,
        help="calls gRPC has accepted but the process has not started yet (request bodies "
        "included); beyond it gRPC's core drops new calls at once (the caller sees "
        "`CANCELLED`): bounds the queue in front of admission when calls arrive faster than "
        "the process can start them. 256 was chosen by measurement against 64 and 1024 "
        "([benchmarks](docs/benchmarks.md#issue-23-second-round-the-unary-path-and-the-"
        "overload-goodput-2026-11-24-0903-0956-utc)); 64 grows memory less under a flood",
    )
    stream_max_inflight_frames: int = setting(
        8,
        minimum=1,
        help="frames of one stream read but not yet answered to the gateway (flow control)",
    )
    stream_frame_timeout_seconds: float = setting(
        8.0,
        minimum=0.1,
        unit="s",
        help="server-side deadline of one stream frame; keep it below the gateways' frame "
        "timeout (`HEADWATER_GATEWAY_CALL_TIMEOUT_SECONDS`, 10 s) so they get an answer "
        "before they resend",
    )
    #: A produce with acks=all needs at least linger plus a broker round trip.
    min_deadline_s: float = setting(
        0.1,
        minimum=0,
        unit="s",
        help="a call (or frame) with less time left than this, or than the recent produce "
        "time, is refused unstarted with RESOURCE_EXHAUSTED",
        renamed=_from_ms("MIN_DEADLINE"),
    )
    #: 4 MiB/s is ~4,000 messages of 1 KiB: a site draining its spool, not the whole tier.
    gateway_rate_bytes_per_second: int = setting(
        4 * 1024 * 1024,
        minimum=0,
        help="per-gateway rate of request bytes (burst: one second's worth); `0`: none. "
        "Override per gateway with `rate_bytes_per_second` in the tokens file. Not applied to "
        "unauthenticated callers. **Per replica**: every gateway limit is kept by each replica "
        "alone (nothing is shared between them), so a gateway whose connections land on N "
        "replicas may send N times its rate; divide by the replica count when you size it",
    )
    gateway_max_inflight_bytes: int = setting(
        2 * 1024 * 1024,
        minimum=0,
        help="per-gateway share of the in-flight bytes (a gateway holding nothing is always "
        "admitted); `0`: none. Override with `max_inflight_bytes` in the tokens file",
    )
    #: One gateway must not take every slot of a replica (issue 23): the gateway library
    #: uses one stream per endpoint (two), or a handful of batch calls; 8 streams leave room
    #: for reconnects overlapping old streams, 128 calls for a fleet of simple one-call
    #: clients behind one token.
    gateway_max_concurrent_rpcs: int = setting(
        128,
        minimum=0,
        help="per-gateway publish calls at once (RESOURCE_EXHAUSTED beyond, `QuotaFailure` "
        "`gateway_max_concurrent_rpcs`), so one gateway cannot take every call slot of a "
        "replica; `0`: none. Override with `max_concurrent_rpcs` in the tokens file. Not "
        "applied to unauthenticated callers",
    )
    gateway_max_streams: int = setting(
        8,
        minimum=0,
        help="per-gateway open streams (the gateway library opens one per endpoint); `0`: "
        "none. Override with `max_streams` in the tokens file. Not applied to "
        "unauthenticated callers",
    )
    overload_retry_delay_s: float = setting(
        0.25,
        minimum=0,
        unit="s",
        help="`RetryInfo` delay sent with RESOURCE_EXHAUSTED",
        renamed=_from_ms("OVERLOAD_RETRY_DELAY"),
    )
    produce_timeout_seconds: float = setting(
        10.0,
        minimum=0.1,
        unit="s",
        help="longest wait for a broker ack (also bounded by the call deadline)",
    )
    #: Measured: batches reach 109-138% of a raw aiokafka producer with confluent, 69-75%
    #: with aiokafka, because aiokafka's record path is pure Python.
    producer: str = setting(
        "confluent",
        choices=PRODUCERS,
        help="produce client (`confluent` is librdkafka); chosen by measurement, see "
        "[docs/benchmarks.md](docs/benchmarks.md)",
        flag=True,
    )
    #: "asyncio" is the way back should a platform lack uvloop.
    event_loop: str = setting(
        "uvloop",
        choices=EVENT_LOOPS,
        help="event loop of the ingest process (`asyncio`: the standard library's); uvloop "
        "measured ~10% less server CPU per call, see [docs/benchmarks.md](docs/benchmarks.md)",
        flag=True,
    )
    drain_grace_seconds: float = setting(
        20.0,
        minimum=0,
        unit="s",
        help="on SIGTERM, time for in-flight calls; keep below the pod's "
        "`terminationGracePeriodSeconds`",
    )
    #: Read from ``HEADWATER_KAFKA_*`` (its own table).
    kafka: KafkaSettings = field(default_factory=KafkaSettings)

    @property
    def effective_health_port(self) -> int:
        """The plaintext health port to open; 0 when there is none."""
        if self.health_port is not None:
            return self.health_port
        return DEFAULT_HEALTH_PORT if self.tls_cert_file else 0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **given: Any) -> Self:
        """Read the settings and the Kafka settings; raise SettingError on a bad value."""
        given.setdefault("kafka", KafkaSettings.from_env(env))
        return super().from_env(env, **given)

    @classmethod
    def from_args(
        cls, args: argparse.Namespace, env: Mapping[str, str] | None = None, **given: Any
    ) -> Self:
        """Read the settings as :meth:`from_env` does; the command's flags win."""
        given.setdefault("kafka", KafkaSettings.from_args(args, env))
        return super().from_args(args, env, **given)

    def check(self) -> None:
        """Reject combinations that cannot work, with a message that says what to change."""
        var = type(self).variable
        if self.max_payload_bytes > CONTRACT_MAX_PAYLOAD_BYTES:
            raise SettingError(
                f"{var('max_payload_bytes')}={self.max_payload_bytes} exceeds the "
                f"contract's {CONTRACT_MAX_PAYLOAD_BYTES}"
            )
        if self.max_batch_messages > CONTRACT_MAX_BATCH_MESSAGES:
            raise SettingError(
                f"{var('max_batch_messages')}={self.max_batch_messages} exceeds the "
                f"contract's {CONTRACT_MAX_BATCH_MESSAGES}"
            )
        if not self.tokens_file and not self.tls_client_ca_file and not self.allow_unauthenticated:
            raise SettingError(
                f"no gateway authentication configured: set {var('tokens_file')} and/or "
                f"{var('tls_client_ca_file')}, or set {var('allow_unauthenticated')}=true for a "
                "trusted network only"
            )
        if self.max_inflight_bytes < self.max_request_bytes:
            raise SettingError(
                f"{var('max_inflight_bytes')}={self.max_inflight_bytes} is below "
                f"{var('max_request_bytes')}={self.max_request_bytes}: the largest "
                "allowed request could never be admitted; raise the first or lower the second"
            )
        if self.gateway_max_inflight_bytes > self.max_inflight_bytes:
            raise SettingError(
                f"{var('gateway_max_inflight_bytes')}={self.gateway_max_inflight_bytes} "
                f"exceeds {var('max_inflight_bytes')}={self.max_inflight_bytes}: a "
                "gateway's share cannot be larger than the whole; lower the first"
            )
        if self.stream_frame_timeout_seconds >= GATEWAY_FRAME_TIMEOUT_SECONDS:
            # Not an error (gateways may be configured longer), but the default gateways
            # would give up first and resend frames this process is still writing.
            log.warning(
                "%s is not below the gateways' default frame timeout; gateways may resend "
                "frames before they are answered",
                var("stream_frame_timeout_seconds"),
                extra={
                    "stream_frame_timeout_s": self.stream_frame_timeout_seconds,
                    "gateway_frame_timeout_s": GATEWAY_FRAME_TIMEOUT_SECONDS,
                },
            )
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise SettingError(f"set both {var('tls_cert_file')} and {var('tls_key_file')}")
        if self.tls_client_ca_file and not self.tls_cert_file:
            raise SettingError(
                f"{var('tls_client_ca_file')} (mTLS) needs {var('tls_cert_file')} and "
                f"{var('tls_key_file')}"
            )
