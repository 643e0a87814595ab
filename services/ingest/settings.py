"""Settings of the ingest service, read once from ``HEADWATER_INGEST_*`` variables."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from headwater.kafka.settings import KafkaSettings
from headwater.runtime.env import SettingError, env_bool, env_float, env_int, env_str

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


@dataclass(frozen=True)
class IngestSettings:
    """Everything the ingest service can be configured with (see the README's table)."""

    listen_address: str = "[::]:50051"
    metrics_port: int = 9464
    tokens_file: str = ""
    allow_unauthenticated: bool = False
    tls_cert_file: str = ""
    tls_key_file: str = ""
    tls_client_ca_file: str = ""
    #: Plaintext port serving only grpc.health.v1, for probes that cannot speak TLS (the
    #: kubelet's). None: ``DEFAULT_HEALTH_PORT`` when TLS is on, off without TLS; 0: off.
    health_port: int | None = None
    max_payload_bytes: int = CONTRACT_MAX_PAYLOAD_BYTES
    max_batch_messages: int = CONTRACT_MAX_BATCH_MESSAGES
    max_request_bytes: int = 4 * 1024 * 1024
    # 8 MiB is ~0.7 s of work at this service's measured capacity: overload is shed as
    # RESOURCE_EXHAUSTED instead of queued (64 MiB grew RSS by 267 MB; docs/benchmarks.md).
    max_inflight_bytes: int = 8 * 1024 * 1024
    #: Publish calls served at once; more are answered RESOURCE_EXHAUSTED, never queued.
    #: Counted by the service itself, so health and reflection are never refused by it.
    max_concurrent_rpcs: int = 1024
    #: Open streams per process: a separate limit, because a stream is held for hours
    #: (~512 gateways with a telemetry and an alarms stream each fit the default).
    max_streams: int = 1024
    #: Calls gRPC has accepted but the event loop has not started yet (request bodies
    #: included); beyond it gRPC's core drops new calls without running Python (the caller
    #: sees CANCELLED). 256 lets a burst of a few hundred calls wait (64 dropped some of a
    #: 200-call burst); memory: up to one request each.
    max_pending_calls: int = 256
    stream_max_inflight_frames: int = 8
    #: Server-side deadline of one stream frame: below the gateway's 10 s frame timeout
    #: (``HEADWATER_GATEWAY_CALL_TIMEOUT_SECONDS``), so the answer arrives before it resends.
    stream_frame_timeout_seconds: float = 8.0
    #: A call with less time left than this is refused unstarted: a produce with acks=all
    #: needs at least linger plus a broker round trip.
    min_deadline_ms: int = 100
    #: Per-gateway rate (request bytes per second, burst of one second); 0 turns it off.
    #: 4 MiB/s is ~4,000 messages of 1 KiB: a site draining its spool, not the whole tier.
    gateway_rate_bytes_per_second: int = 4 * 1024 * 1024
    #: Per-gateway share of the in-flight bytes; 0 turns it off. A gateway holding nothing
    #: is always admitted (subject to the process bound), so one request of any allowed
    #: size passes.
    gateway_max_inflight_bytes: int = 2 * 1024 * 1024
    #: Per-gateway publish calls at once and open streams; 0 turns a limit off. One gateway
    #: must not take every slot of a replica (issue 23): the gateway library uses one
    #: stream per endpoint (two), or a handful of batch calls; 8 streams leave room for
    #: reconnects overlapping old streams, 128 calls for a fleet of simple one-call clients
    #: behind one token.
    gateway_max_concurrent_rpcs: int = 128
    gateway_max_streams: int = 8
    overload_retry_delay_ms: int = 250
    produce_timeout_seconds: float = 10.0
    drain_grace_seconds: float = 20.0
    #: The produce client: "confluent" (librdkafka) or "aiokafka". Measured: batches reach
    #: 109-138% of a raw aiokafka producer with confluent, 69-75% with aiokafka, because
    #: aiokafka's record path is pure Python (docs/benchmarks.md).
    producer: str = "confluent"
    #: The event loop: "uvloop" or "asyncio" (the standard library's). Measured with 64
    #: single-message callers: uvloop spends ~10% less server CPU per call
    #: (docs/benchmarks.md); "asyncio" is the way back should a platform lack uvloop.
    event_loop: str = "uvloop"
    kafka: KafkaSettings = field(default_factory=KafkaSettings)

    @property
    def effective_health_port(self) -> int:
        """The plaintext health port to open; 0 when there is none."""
        if self.health_port is not None:
            return self.health_port
        return DEFAULT_HEALTH_PORT if self.tls_cert_file else 0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> IngestSettings:
        """Read the settings from the environment; raise SettingError on a bad value."""
        env = os.environ if env is None else env
        settings = cls(
            listen_address=env_str(env, "HEADWATER_INGEST_LISTEN_ADDRESS", cls.listen_address),
            metrics_port=env_int(env, "HEADWATER_INGEST_METRICS_PORT", cls.metrics_port),
            tokens_file=env_str(env, "HEADWATER_INGEST_TOKENS_FILE", ""),
            allow_unauthenticated=env_bool(env, "HEADWATER_INGEST_ALLOW_UNAUTHENTICATED", False),
            tls_cert_file=env_str(env, "HEADWATER_INGEST_TLS_CERT_FILE", ""),
            tls_key_file=env_str(env, "HEADWATER_INGEST_TLS_KEY_FILE", ""),
            tls_client_ca_file=env_str(env, "HEADWATER_INGEST_TLS_CLIENT_CA_FILE", ""),
            health_port=(
                env_int(env, "HEADWATER_INGEST_HEALTH_PORT", 0)
                if env_str(env, "HEADWATER_INGEST_HEALTH_PORT", "")
                else None
            ),
            max_payload_bytes=env_int(
                env, "HEADWATER_INGEST_MAX_PAYLOAD_BYTES", cls.max_payload_bytes, 1
            ),
            max_batch_messages=env_int(
                env, "HEADWATER_INGEST_MAX_BATCH_MESSAGES", cls.max_batch_messages, 1
            ),
            max_request_bytes=env_int(
                env, "HEADWATER_INGEST_MAX_REQUEST_BYTES", cls.max_request_bytes, 1024
            ),
            max_inflight_bytes=env_int(
                env, "HEADWATER_INGEST_MAX_INFLIGHT_BYTES", cls.max_inflight_bytes, 1024
            ),
            max_concurrent_rpcs=env_int(
                env, "HEADWATER_INGEST_MAX_CONCURRENT_RPCS", cls.max_concurrent_rpcs, 1
            ),
            max_streams=env_int(env, "HEADWATER_INGEST_MAX_STREAMS", cls.max_streams, 1),
            max_pending_calls=env_int(
                env, "HEADWATER_INGEST_MAX_PENDING_CALLS", cls.max_pending_calls, 1
            ),
            stream_max_inflight_frames=env_int(
                env, "HEADWATER_INGEST_STREAM_MAX_INFLIGHT_FRAMES", 8, 1
            ),
            stream_frame_timeout_seconds=env_float(
                env,
                "HEADWATER_INGEST_STREAM_FRAME_TIMEOUT_SECONDS",
                cls.stream_frame_timeout_seconds,
                0.1,
            ),
            min_deadline_ms=env_int(env, "HEADWATER_INGEST_MIN_DEADLINE_MS", cls.min_deadline_ms),
            gateway_rate_bytes_per_second=env_int(
                env,
                "HEADWATER_INGEST_GATEWAY_RATE_BYTES_PER_SECOND",
                cls.gateway_rate_bytes_per_second,
            ),
            gateway_max_inflight_bytes=env_int(
                env, "HEADWATER_INGEST_GATEWAY_MAX_INFLIGHT_BYTES", cls.gateway_max_inflight_bytes
            ),
            gateway_max_concurrent_rpcs=env_int(
                env,
                "HEADWATER_INGEST_GATEWAY_MAX_CONCURRENT_RPCS",
                cls.gateway_max_concurrent_rpcs,
            ),
            gateway_max_streams=env_int(
                env, "HEADWATER_INGEST_GATEWAY_MAX_STREAMS", cls.gateway_max_streams
            ),
            overload_retry_delay_ms=env_int(env, "HEADWATER_INGEST_OVERLOAD_RETRY_DELAY_MS", 250),
            produce_timeout_seconds=env_float(
                env, "HEADWATER_INGEST_PRODUCE_TIMEOUT_SECONDS", cls.produce_timeout_seconds, 0.1
            ),
            drain_grace_seconds=env_float(
                env, "HEADWATER_INGEST_DRAIN_GRACE_SECONDS", cls.drain_grace_seconds
            ),
            producer=env_str(env, "HEADWATER_INGEST_PRODUCER", cls.producer).lower(),
            event_loop=env_str(env, "HEADWATER_INGEST_EVENT_LOOP", cls.event_loop).lower(),
            kafka=KafkaSettings.from_env(env),
        )
        settings.check()
        return settings

    def check(self) -> None:
        """Reject combinations that cannot work, with a message that says what to change."""
        if self.max_payload_bytes > CONTRACT_MAX_PAYLOAD_BYTES:
            raise SettingError(
                f"HEADWATER_INGEST_MAX_PAYLOAD_BYTES={self.max_payload_bytes} exceeds the "
                f"contract's {CONTRACT_MAX_PAYLOAD_BYTES}"
            )
        if self.max_batch_messages > CONTRACT_MAX_BATCH_MESSAGES:
            raise SettingError(
                f"HEADWATER_INGEST_MAX_BATCH_MESSAGES={self.max_batch_messages} exceeds the "
                f"contract's {CONTRACT_MAX_BATCH_MESSAGES}"
            )
        if not self.tokens_file and not self.tls_client_ca_file and not self.allow_unauthenticated:
            raise SettingError(
                "no gateway authentication configured: set HEADWATER_INGEST_TOKENS_FILE "
                "and/or HEADWATER_INGEST_TLS_CLIENT_CA_FILE, or set "
                "HEADWATER_INGEST_ALLOW_UNAUTHENTICATED=true for a trusted network only"
            )
        if self.producer not in PRODUCERS:
            raise SettingError(
                f"HEADWATER_INGEST_PRODUCER={self.producer!r} is not one of {', '.join(PRODUCERS)}"
            )
        if self.event_loop not in EVENT_LOOPS:
            raise SettingError(
                f"HEADWATER_INGEST_EVENT_LOOP={self.event_loop!r} is not one of "
                f"{', '.join(EVENT_LOOPS)}"
            )
        if self.max_inflight_bytes < self.max_request_bytes:
            raise SettingError(
                f"HEADWATER_INGEST_MAX_INFLIGHT_BYTES={self.max_inflight_bytes} is below "
                f"HEADWATER_INGEST_MAX_REQUEST_BYTES={self.max_request_bytes}: the largest "
                "allowed request could never be admitted; raise the first or lower the second"
            )
        if self.gateway_max_inflight_bytes > self.max_inflight_bytes:
            raise SettingError(
                f"HEADWATER_INGEST_GATEWAY_MAX_INFLIGHT_BYTES={self.gateway_max_inflight_bytes} "
                f"exceeds HEADWATER_INGEST_MAX_INFLIGHT_BYTES={self.max_inflight_bytes}: a "
                "gateway's share cannot be larger than the whole; lower the first"
            )
        if self.stream_frame_timeout_seconds >= GATEWAY_FRAME_TIMEOUT_SECONDS:
            # Not an error (gateways may be configured longer), but the default gateways
            # would give up first and resend frames this process is still writing.
            log.warning(
                "HEADWATER_INGEST_STREAM_FRAME_TIMEOUT_SECONDS is not below the gateways' "
                "default frame timeout; gateways may resend frames before they are answered",
                extra={
                    "stream_frame_timeout_s": self.stream_frame_timeout_seconds,
                    "gateway_frame_timeout_s": GATEWAY_FRAME_TIMEOUT_SECONDS,
                },
            )
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise SettingError(
                "set both HEADWATER_INGEST_TLS_CERT_FILE and HEADWATER_INGEST_TLS_KEY_FILE"
            )
        if self.tls_client_ca_file and not self.tls_cert_file:
            raise SettingError(
                "HEADWATER_INGEST_TLS_CLIENT_CA_FILE (mTLS) needs HEADWATER_INGEST_TLS_CERT_FILE "
                "and HEADWATER_INGEST_TLS_KEY_FILE"
            )
