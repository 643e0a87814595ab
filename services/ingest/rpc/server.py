"""Build, run and drain the ingest gRPC server.

Building (``IngestServer.start``) is separate from running (``serve``) so tests can bind
port 0 and drive the server in-process. Shutdown order on SIGTERM: health NOT_SERVING,
stop reading new stream frames, ``server.stop(grace)`` (in-flight calls finish), then
flush and stop the producer.

Health has two names. ``""`` (the process; the chart's probes) is SERVING once the producer
is connected: a broker outage never restarts a pod, and its calls keep answering
retriably. ``headwater.ingest.v1.IngestService`` is SERVING only when, besides, the
cluster can take writes (``writability.py``): it says NOT_SERVING while no ingest
partition has the in-sync replicas an ``acks=all`` write needs, and the log says why.
"""

from __future__ import annotations

import asyncio
import gc
import logging

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from headwater.endpoints import ENDPOINTS, SERVICE_NAME
from headwater.ingest.admission.auth import Authenticator, TokenStore
from headwater.ingest.admission.limits import (
    producer_queue_limits,
    shorten_gil_switch_interval,
    transport_options,
)
from headwater.ingest.commands.service import CommandService
from headwater.ingest.commands.settings import CommandSettings
from headwater.ingest.metrics import IngestMetrics
from headwater.ingest.rpc.decoding import DecodingRegistrar
from headwater.ingest.rpc.reflection import enable_reflection
from headwater.ingest.rpc.servicer import IngestServicer
from headwater.ingest.rpc.tls import RotatingCertificates
from headwater.ingest.settings import IngestSettings
from headwater.ingest.writability import WritabilityWatch
from headwater.ingest.writers.aiokafka_writer import AiokafkaWriter
from headwater.ingest.writers.confluent_writer import ConfluentWriter
from headwater.ingest.writers.protocol import RecordWriter
from headwater.proto.ingest.v1 import ingest_service_pb2
from headwater.runtime.signals import async_stop_event
from headwater.runtime.telemetry import Telemetry, create_telemetry

log = logging.getLogger(__name__)
_SERVING = health_pb2.HealthCheckResponse.SERVING
_NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
#: Bytes of protobuf framing around the messages of a request.
_REQUEST_OVERHEAD = 64 * 1024
#: Share of new traces sampled when OTEL_TRACES_SAMPLER is unset (parent-based: a gateway's
#: sampled traceparent is always followed). Two recorded spans were a quarter of a single
#: message call's CPU (docs/benchmarks.md); one call in ten still shows the path.
TRACE_RATIO = 0.1


def _server_credentials(settings: IngestSettings) -> grpc.ServerCredentials | None:
    """TLS credentials reloaded when the files change (tls.py), or None for plaintext."""
    if not settings.tls_cert_file:
        return None
    files = RotatingCertificates(
        settings.tls_cert_file, settings.tls_key_file, settings.tls_client_ca_file
    )
    return files.credentials()


def create_writer(settings: IngestSettings) -> RecordWriter:
    """Return the produce client ``HEADWATER_INGEST_PRODUCER`` names."""
    if settings.producer == "aiokafka":
        # One open batch per partition: 64 partitions' batches fit in the in-flight bound.
        batch = min(1024 * 1024, max(16 * 1024, settings.max_inflight_bytes // 64))
        return AiokafkaWriter(settings.kafka, settings.produce_timeout_seconds, batch)
    return ConfluentWriter(
        settings.kafka,
        settings.produce_timeout_seconds,
        producer_queue_limits(settings.max_inflight_bytes),
    )


class IngestServer:
    """One ingest process: gRPC server, health, reflection, producer and telemetry."""

    def __init__(
        self,
        settings: IngestSettings,
        writer: RecordWriter | None = None,
        telemetry: Telemetry | None = None,
        commands: CommandSettings | None = None,
    ) -> None:
        self.settings = settings
        #: Commands to devices (docs/commands.md); None or disabled: not served.
        self.command_settings = commands
        self.commands: CommandService | None = None
        self.writer = writer or create_writer(settings)
        self.telemetry = telemetry or create_telemetry("headwater-ingest", trace_ratio=TRACE_RATIO)
        self.port = 0
        #: The plaintext health-only port (0: none); see _start_health_server.
        self.health_port = 0
        self._server: grpc.aio.Server | None = None
        self._health_server: grpc.aio.Server | None = None
        self._health = health.aio.HealthServicer()
        self._servicer: IngestServicer | None = None
        self._connector: asyncio.Task[None] | None = None
        #: The two facts health is made of (module docstring).
        self._producer_ready = False
        self._cluster_writable = True
        self._watch: asyncio.Task[None] | None = None
        if isinstance(self.writer, ConfluentWriter):
            self.writer.on_fatal = self._writer_failed

    async def start(self) -> int:
        """Bind and start serving (NOT_SERVING until Kafka is reached); return the port."""
        s = self.settings
        store = TokenStore(s.tokens_file) if s.tokens_file else None
        if store:
            store.load()  # fail fast on a missing or malformed file
        if s.allow_unauthenticated:
            log.warning(
                "gateway authentication is OFF (HEADWATER_INGEST_ALLOW_UNAUTHENTICATED=true): "
                "anyone who can reach this port can write any device. Use only on a trusted "
                "network"
            )
        authenticator = Authenticator(
            store, s.allow_unauthenticated, mtls=bool(s.tls_client_ca_file)
        )
        self._servicer = IngestServicer(
            s,
            self.writer,
            authenticator,
            self.telemetry.tracer_provider.get_tracer("headwater.ingest"),
            IngestMetrics(self.telemetry.meter_provider.get_meter("headwater.ingest")),
        )
        max_message = s.max_batch_messages * (s.max_payload_bytes + 1024) + _REQUEST_OVERHEAD
        # No maximum_concurrent_rpcs: grpc.aio would refuse health checks with the rest and
        # send no RetryInfo. The servicer counts its own calls and streams (admission/limits.py).
        shorten_gil_switch_interval()
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", min(s.max_request_bytes, max_message)),
                ("grpc.keepalive_time_ms", 60_000),
                ("grpc.keepalive_permit_without_calls", 1),
                ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
                ("grpc.max_connection_age_ms", 15 * 60_000),  # rebalance long-lived gateways
                ("grpc.max_connection_age_grace_ms", 60_000),
                *transport_options(s),
            ],
        )
        server.add_generic_rpc_handlers([self._servicer.rpc_handler()])
        if self.command_settings is not None and self.command_settings.enabled:
            # Commands: ReceiveCommands and the relay, in their own package (hook only).
            self.commands = CommandService(
                self.command_settings,
                s.kafka,
                self.writer,
                authenticator,
                self.telemetry.meter_provider.get_meter("headwater.ingest.commands"),
                self._servicer.stream_slot,
            )
            server.add_generic_rpc_handlers([self.commands.rpc_handler()])
        # The libraries' servicers decode in their handlers (decoding.py); ours take bytes.
        health_pb2_grpc.add_HealthServicer_to_server(self._health, DecodingRegistrar(server))
        # Descriptors, not names: reflection must be able to describe what it lists.
        enable_reflection(
            server,
            [
                ingest_service_pb2.DESCRIPTOR.services_by_name["IngestService"],
                health_pb2.DESCRIPTOR.services_by_name["Health"],
            ],
        )
        credentials = _server_credentials(s)
        if credentials:
            self.port = server.add_secure_port(s.listen_address, credentials)
        else:
            self.port = server.add_insecure_port(s.listen_address)
        await self._publish_health()
        await server.start()
        self._server = server
        await self._start_health_server()
        self._connector = asyncio.create_task(self._connect_writer())
        watch = WritabilityWatch(
            s.kafka,
            {ep.topic for ep in ENDPOINTS},
            self._servicer.outcomes,
            self._cluster_writability_changed,
            self.telemetry.meter_provider.get_meter("headwater.ingest"),
        )
        self._watch = asyncio.create_task(watch.run())
        if self.commands is not None:
            self.commands.start()
        log.info(
            "ingest service listening",
            extra={
                "address": s.listen_address,
                "port": self.port,
                "tls": bool(credentials),
                "health_port": self.health_port or None,
                "event_loop": type(asyncio.get_running_loop()).__module__.split(".")[0],
            },
        )
        return self.port

    async def _start_health_server(self) -> None:
        """Serve grpc.health.v1 alone on a plaintext port (HEADWATER_INGEST_HEALTH_PORT).

        The kubelet's gRPC probe cannot speak TLS; without this port a TLS pod could only
        be probed with a TCP connect, which ignores NOT_SERVING. The same HealthServicer
        answers here, so draining and a replaced producer show on both ports. Nothing but
        health is registered on it: the ingest API stays behind TLS.
        """
        port = self.settings.effective_health_port
        if not port:
            return
        host = self.settings.listen_address.rsplit(":", 1)[0]
        server = grpc.aio.server()
        health_pb2_grpc.add_HealthServicer_to_server(self._health, DecodingRegistrar(server))
        self.health_port = server.add_insecure_port(f"{host}:{port}")
        await server.start()
        self._health_server = server

    async def _publish_health(self) -> None:
        """Set both health names from the producer's and the cluster's state."""
        process = _SERVING if self._producer_ready else _NOT_SERVING
        writes = _SERVING if self._producer_ready and self._cluster_writable else _NOT_SERVING
        await self._health.set("", process)
        await self._health.set(SERVICE_NAME, writes)

    async def _cluster_writability_changed(self, writable: bool, reason: str) -> None:
        """Turn ``SERVICE_NAME``'s health with the writes (the watch logged the reason)."""
        self._cluster_writable = writable
        log.warning(
            "health of %s: %s",
            SERVICE_NAME,
            "SERVING, writes are acknowledged again" if writable else "NOT_SERVING",
            extra={"reason": reason} if reason else {},
        )
        await self._publish_health()

    async def _connect_writer(self) -> None:
        """Connect the producer, retrying with backoff; SERVING once connected."""
        delay = 0.5
        while True:
            try:
                await self.writer.start()
                break
            except Exception as exc:
                log.warning(
                    "cannot reach Kafka yet; retrying. Check HEADWATER_KAFKA_BOOTSTRAP_SERVERS "
                    "and that the brokers are up",
                    extra={"error": f"{type(exc).__name__}: {exc}", "retry_in_s": delay},
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)
        self._producer_ready = True
        await self._publish_health()
        log.info(
            "connected to Kafka; serving",
            extra={"bootstrap": self.settings.kafka.bootstrap_servers},
        )

    def _writer_failed(self, reason: str) -> None:
        """Replace a producer that reported a fatal error (called on the event loop).

        Restart in-process rather than exit: the gRPC server, open streams and the
        admission books stay; calls are refused UNAVAILABLE (retriable) for the moment
        a new producer takes to connect. See docs/operations.md, "Fatal producer error".
        """
        if self._server is None or (self._connector is not None and not self._connector.done()):
            return  # stopping, or already (re)connecting
        self._connector = asyncio.create_task(self._restart_writer(reason))

    async def _restart_writer(self, reason: str) -> None:
        """NOT_SERVING, stop the dead producer, connect a new one, then SERVING."""
        log.error(
            "fatal Kafka producer error: NOT_SERVING while a new producer connects",
            extra={"error": reason},
        )
        self._producer_ready = False
        await self._publish_health()
        await self.writer.stop(timeout_s=1.0)
        await self._connect_writer()

    async def ready(self, within_s: float) -> None:
        """Wait until the producer is connected (for tests and the dev stack)."""
        assert self._connector is not None
        await asyncio.wait_for(asyncio.shield(self._connector), within_s)

    async def stop(self, grace_s: float | None = None) -> None:
        """Drain and stop: NOT_SERVING, finish in-flight calls, flush the producer."""
        if self._server is None:
            return
        grace = self.settings.drain_grace_seconds if grace_s is None else grace_s
        log.info("draining ingest service", extra={"grace_s": grace})
        await self._health.enter_graceful_shutdown()
        assert self._servicer is not None
        self._servicer.begin_drain()
        if self._connector:
            self._connector.cancel()
        if self._watch:
            self._watch.cancel()
        # The command parts stop beside the drain (command streams end with the server;
        # another replica reads and relays), so closing their consumers costs no extra time.
        commands_stopped = (
            asyncio.ensure_future(self.commands.stop()) if self.commands is not None else None
        )
        await self._server.stop(grace)
        self._server = None
        if commands_stopped is not None:
            await commands_stopped
        if self._health_server is not None:
            await self._health_server.stop(0)  # NOT_SERVING was visible through the drain
            self._health_server = None
        await self.writer.stop(timeout_s=max(1.0, grace / 2))
        self.telemetry.shutdown()
        log.info("ingest service stopped")


def freeze_startup_heap() -> None:
    """Keep what the process built to serve (modules, settings, clients) out of later collections.

    Every call leaves a few objects in a reference cycle inside grpc.aio (its method
    lookup, grpcio 1.85), so the collector runs every few hundred calls, and each full
    collection walked the ~50,000 objects a started server holds: ~9 µs of a
    single-message call, 0.4 µs once they are frozen (issue 40, docs/benchmarks.md).
    Frozen objects are still freed by reference counting; only a cycle among them stays
    until the process exits. Call once, after the server started.
    """
    gc.collect()
    gc.freeze()


async def serve(settings: IngestSettings) -> None:
    """Run the ingest service until SIGTERM or SIGINT, then drain and exit."""
    telemetry = create_telemetry(
        "headwater-ingest",
        prometheus_port=settings.metrics_port,
        set_global=True,
        trace_ratio=TRACE_RATIO,
    )
    server = IngestServer(settings, telemetry=telemetry, commands=CommandSettings.from_env())
    await server.start()
    freeze_startup_heap()
    stop = async_stop_event()  # SIGINT or SIGTERM, whatever was inherited
    await stop.wait()
    await server.stop()
