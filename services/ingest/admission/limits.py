"""Admission before work: refuse early and cheaply, so overload answers instead of growing.

A call is admitted, or refused with RESOURCE_EXHAUSTED and a RetryInfo delay, before its
request is parsed, in this order (cheapest and most protective first):

1. a slot: publish calls and open streams are counted separately, per process
   (``HEADWATER_INGEST_MAX_CONCURRENT_RPCS``, ``HEADWATER_INGEST_MAX_STREAMS``) and per
   gateway (``HEADWATER_INGEST_GATEWAY_MAX_CONCURRENT_RPCS``, ``..._GATEWAY_MAX_STREAMS``,
   tokens-file overrides), so one gateway cannot take every slot of a replica
   (``slots.py``). Slots are held in ``with`` blocks, so every exit gives them back.
   gRPC's own ``maximum_concurrent_rpcs`` is not used: it refuses health checks and
   reflection too, and sends no RetryInfo (grpcio 1.85);
2. the deadline (:meth:`Admission.check_deadline`, once per publish call or stream frame):
   a request whose time left cannot cover the service's recent produce time (or
   ``HEADWATER_INGEST_MIN_DEADLINE_SECONDS``) is refused, not started;
3. before the request body is read (:meth:`Admission.check_room`): the calling gateway's
   rate and in-flight share (``quotas.py``) and the process's byte bound, with the body's
   size estimated from recent requests, so the usual refusal under overload never copies
   the body out of gRPC. The estimate only spares work: a caller can train it;
4. reading the body (:meth:`Admission.reading_body`, ``body_reads.py``): a body being
   read counts at the largest size it may turn out to have
   (``HEADWATER_INGEST_MAX_REQUEST_BYTES``), never at an estimate a caller could train,
   against a room as large as the in-flight bound: bodies being read never pass the
   bound, whatever came before. A read that does not fit waits its turn briefly (holding
   its slot, not a body), then is refused; each gateway reads one body at a time;
5. once the body is read, the checks with its real size (:meth:`Admission.admit`):
   request bytes are counted from then until the producer has acknowledged (or failed)
   every record made from them, so bytes in the producer's queue after a call timed out
   or was cancelled by its caller still count. The producer's own queue limits are
   derived from the same bound (:func:`producer_queue_limits`), so neither can grow past
   it.

Calls gRPC has accepted but the event loop has not yet started are bounded in gRPC's core
(``rpc/server.py``: ``HEADWATER_INGEST_MAX_PENDING_CALLS``), so no queue sits in front of these
checks unbounded.

Waiting for room would queue callers in memory, which is the growth this prevents;
RESOURCE_EXHAUSTED with a retry delay moves the waiting to the gateway's spool.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from headwater.ingest.admission.auth import Gateway
from headwater.ingest.admission.body_reads import BodyReads, Reading
from headwater.ingest.admission.quotas import GatewayQuotas
from headwater.ingest.admission.slots import Slot, Slots
from headwater.ingest.errors import OverloadedError
from headwater.ingest.settings import IngestSettings

#: The variable that sets a limit, named in refusals so an operator knows what to change.
_var = IngestSettings.variable

#: Bytes the service adds to a record beyond the message itself: the key and the headers
#: (ids, tenant, received-at, endpoint, trace context; ~200 in practice).
RECORD_HEADER_BYTES = 256
#: A device message smaller than this is unusual (message id, device id, content type and
#: device time alone take ~60): bounds how many records the bytes can turn into.
MIN_RECORD_BYTES = 64
#: Half-life of the produce-time estimate once no produce finishes: after a broker stall
#: the estimate falls back within seconds instead of refusing every call forever.
ESTIMATE_HALF_LIFE_S = 1.0
#: Longest wait for room to read a body before the call is refused (see reading_body).
READ_WAIT_MAX_S = 1.0
#: Weight of the newest request in the request-size estimate (an exponential average).
SIZE_ESTIMATE_WEIGHT = 0.1


def transport_options(settings: IngestSettings) -> list[tuple[str, int]]:
    """Server options that bound what gRPC's transport holds before a handler runs.

    grpc.aio starts one new call per event-loop iteration; calls that arrive faster wait
    in gRPC's core, request body included, where no handler can refuse them (measured:
    +340 MB and calls expiring there as CANCELLED at 10x capacity). gRPC's core drops
    calls beyond ``max_pending_requests`` at once, and some at random between it and the
    hard limit (twice it). It sends no status: the caller sees CANCELLED (grpcio 1.85),
    so this is the backstop for a process too busy to start calls, not the way calls are
    meant to be refused (that is RESOURCE_EXHAUSTED with RetryInfo, from this module).

    Args:
        settings: the service's settings (``HEADWATER_INGEST_MAX_PENDING_CALLS``).

    Returns:
        Options for ``grpc.aio.server``.
    """
    pending = settings.max_pending_calls
    return [
        ("grpc.server.max_pending_requests", pending),
        ("grpc.server.max_pending_requests_hard_limit", 2 * pending),
    ]


#: GIL switch interval of the ingest process (Python's default is 5 ms); see below.
GIL_SWITCH_INTERVAL_S = 0.0005


def shorten_gil_switch_interval() -> None:
    """Let gRPC's completion-queue thread take the GIL sooner (process-wide).

    grpc.aio hands every event of gRPC's core (a new call, a request read, a status
    sent) to the event loop from its own thread, which needs the GIL to do so. While
    the loop is busy parsing requests it holds the GIL, and the other thread gets it
    only at the switch interval: at the default 5 ms that caps how many calls per
    second the process can even start, refusals included, and the rest wait inside
    gRPC (measured: most calls at 10x capacity expired there as CANCELLED).
    """
    sys.setswitchinterval(min(sys.getswitchinterval(), GIL_SWITCH_INTERVAL_S))


def producer_queue_limits(max_inflight_bytes: int) -> tuple[int, int]:
    """Return (bytes, records) the producer may queue, derived from the in-flight bound.

    Every queued record belongs to admitted request bytes, so the producer never needs
    more than the bound plus each record's key and headers. A larger queue (librdkafka's
    default is 1 GiB) would only hold records nobody counts; a full one makes ``send``
    wait, bounded by the call's deadline.

    Args:
        max_inflight_bytes: the process bound, ``HEADWATER_INGEST_MAX_INFLIGHT_BYTES``.

    Returns:
        (bytes, records) for ``queue.buffering.max.kbytes`` (in bytes) and
        ``queue.buffering.max.messages``.
    """
    records = max(1, max_inflight_bytes // MIN_RECORD_BYTES)
    return max_inflight_bytes + records * RECORD_HEADER_BYTES, records


class ProduceTimeEstimate:
    """How long a produce takes right now: an average of recent ones that decays when idle."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._value = 0.0
        self._at = clock()

    def record(self, seconds: float) -> None:
        """Fold one completed produce's duration into the estimate."""
        self._value = 0.8 * self.value() + 0.2 * seconds
        self._at = self._clock()

    def value(self) -> float:
        """The current estimate in seconds."""
        idle = self._clock() - self._at
        return self._value * math.pow(0.5, idle / ESTIMATE_HALF_LIFE_S)


@dataclass
class Ticket:
    """What one admitted call holds; :meth:`release` gives it back exactly once."""

    admission: Admission
    gateway: Gateway
    nbytes: int
    released: bool = False

    def release(self) -> None:
        """Give the call's bytes back to the process and to its gateway's share."""
        if self.released:
            return
        self.released = True
        self.admission.in_use -= self.nbytes
        self.admission.quotas.give(self.gateway, self.nbytes)


class Admission:
    """The limits of one ingest process, checked before a call does any work."""

    def __init__(self, settings: IngestSettings, quotas: GatewayQuotas | None = None) -> None:
        self.max_bytes = settings.max_inflight_bytes
        self.in_use = 0
        #: Bodies being read, each at the largest request gRPC accepts (body_reads.py).
        # (At most the whole bound: settings.check keeps requests within it, and a read
        # reserving more than the bound could never start.)
        # Their own room, as large as the bound: counting them against the admitted bytes
        # too would refuse every stream frame while two 4 MiB reservations stand (the
        # default bounds), though the bodies behind them are usually a few hundred bytes.
        self.reads = BodyReads(
            min(settings.max_request_bytes, self.max_bytes),
            lambda: self.max_bytes,
            self._process_full,
        )
        self._min_deadline_s = settings.min_deadline_s
        self._retry_delay_s = settings.overload_retry_delay_s
        self.slots = Slots(settings, self._retry_delay_s)
        self.quotas = quotas or GatewayQuotas(
            settings.gateway_rate_bytes_per_second,
            settings.gateway_max_inflight_bytes,
            self._retry_delay_s,
        )
        self.produce_time = ProduceTimeEstimate()
        #: Recent request size (bytes, exponential average): what a body not yet read is
        #: expected to hold. 0 until the first request, so the first is never refused early.
        self.typical_request = 0.0

    # --- slots (slots.py) ---------------------------------------------------------------

    def rpc_slot(self, gateway: Gateway) -> Slot:
        """Hold a publish-call slot of the process and of ``gateway`` for the block.

        Raises:
            OverloadedError: on entering, the process's or the gateway's limit is reached.
        """
        return Slot(self.slots.calls, gateway)

    def stream_slot(self, gateway: Gateway) -> Slot:
        """Hold a stream slot of the process and of ``gateway`` for the block.

        Raises:
            OverloadedError: on entering, the process's or the gateway's limit is reached.
        """
        return Slot(self.slots.streams, gateway)

    @property
    def rpcs(self) -> int:
        """Publish calls being served."""
        return self.slots.calls.held

    @property
    def streams(self) -> int:
        """Open streams."""
        return self.slots.streams.held

    @property
    def rpcs_by_gateway(self) -> dict[str, int]:
        """Publish calls being served, per gateway holding one."""
        return self.slots.calls.by_gateway

    @property
    def streams_by_gateway(self) -> dict[str, int]:
        """Open streams, per gateway holding one."""
        return self.slots.streams.by_gateway

    # --- per call ---------------------------------------------------------------------

    def check_deadline(self, time_left_s: float | None) -> None:
        """Refuse a call (or frame) whose time left cannot cover a produce now.

        Args:
            time_left_s: seconds until the call's (or frame's) deadline; None: no deadline.
        """
        if time_left_s is None:
            return
        needed = max(self._min_deadline_s, self.produce_time.value())
        if time_left_s < needed:
            raise OverloadedError(
                f"the deadline leaves {time_left_s * 1000:.0f} ms; this replica needs "
                f"~{needed * 1000:.0f} ms to write to Kafka now (at least "
                f"{_var('min_deadline_s')}); refused unstarted: retry later or with a "
                "longer deadline",
                retry_delay_s=self._retry_delay_s,
                limit="min_deadline_ms",
                setting=_var("min_deadline_s"),
                limit_value=round(needed * 1000),
            )

    def check_room(self, gateway: Gateway) -> None:
        """Refuse a call before its body is read if a body of the usual size cannot fit.

        The usual size is estimated from recent requests, so under overload most calls
        are refused here without their body ever being copied. A caller can train the
        estimate, so this check only spares work: the process bound is kept by
        :meth:`reading_body` (which trusts no estimate) and :meth:`admit` (real size).
        Books nothing.
        """
        expected = max(1, round(self.typical_request))
        self.quotas.check(gateway, expected)
        # Bodies being read count at the same estimate here, so a burst of calls cannot
        # all pass this check and then all be refused once read.
        if self.in_use + (self.reads.count + 1) * expected > self.max_bytes:
            raise self._process_full()

    def reading_body(self, gateway: Gateway, time_left_s: float | None) -> Reading:
        """Reserve room for ``gateway``'s body being read, at the largest size it may have.

        See ``body_reads.py``. Waits for room (holding no body) at most READ_WAIT_MAX_S,
        and no longer than the call's own time less what a produce takes now.

        Raises:
            OverloadedError: no room came in time.
        """
        # Longer than the overload retry delay, because 64 callers arriving at once queue
        # here for one read each, yet short enough that a stalled replica still refuses
        # (with RetryInfo) instead of holding its callers.
        wait_s = READ_WAIT_MAX_S
        if time_left_s is not None:
            needed = max(self._min_deadline_s, self.produce_time.value())
            wait_s = max(0.0, min(wait_s, time_left_s - needed))
        return self.reads.reading(gateway, wait_s)

    @property
    def reading_bytes(self) -> int:
        """Bytes reserved by bodies being read."""
        return self.reads.reserved

    def _process_full(self) -> OverloadedError:
        return OverloadedError(
            f"ingest replica is at its in-flight limit ({self.max_bytes} bytes, "
            f"{_var('max_inflight_bytes')}); retry after "
            f"{self._retry_delay_s:.2f}s or send to another replica",
            retry_delay_s=self._retry_delay_s,
            limit="max_inflight_bytes",
            setting=_var("max_inflight_bytes"),
            limit_value=self.max_bytes,
        )

    def admit(self, gateway: Gateway, nbytes: int) -> Ticket:
        """Book ``nbytes`` of a call for ``gateway`` or raise OverloadedError.

        Nothing is booked unless every check passes, so a refusal costs neither the
        gateway's rate nor the process's bytes.

        Args:
            gateway: the authenticated caller.
            nbytes: the request's (or stream frame's) size on the wire.

        Returns:
            The ticket to release once every record made from the request is acknowledged
            or failed.
        """
        self.typical_request += SIZE_ESTIMATE_WEIGHT * (nbytes - self.typical_request)
        self.quotas.check(gateway, nbytes)
        if self.in_use + nbytes > self.max_bytes:
            raise self._process_full()
        self.quotas.take(gateway, nbytes)
        self.in_use += nbytes
        return Ticket(self, gateway, nbytes)
