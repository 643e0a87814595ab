"""Per-device keyed state: dedupe, master data, parked retries and the entity snapshot.

One ``transformWithState`` operator keyed by device id does all of it, because the per-key
cost of the operator dominates (measured: ~0.7 ms per key per batch row-based, ~2.3 ms with
pandas), so several operators would multiply it. Master data arrives as a stream on the
same key, so lookups never leave the partition and late master data reaches parked messages.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, Row
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)

from headwater.enricher import route
from headwater.enricher.births import BirthCertificates
from headwater.enricher.decode import decode_record
from headwater.enricher.dedupe import DedupWindow, dedup_key
from headwater.enricher.enrich import build_events
from headwater.enricher.formats.base import NormalizeError
from headwater.enricher.normalize import normalize_message
from headwater.enricher.schema import OUTPUT
from headwater.enricher.settings import EnricherTopics
from headwater.proto.events.v1 import completion_pb2 as cpb
from headwater.proto.events.v1 import device_state_pb2, parked_message_pb2

MASTER = "site string, area_code string, vendor_format string, model string"
DEVICE = (
    "tenant string, last_seen_ms long, last_sequence long, gaps long, message_count long, "
    "last_message_id string, latest string, latest_dropped long"
)
#: Measurement names longer than this are never kept in the snapshot (bounded state).
MAX_NAME_CHARS = 128
#: Why a message failed inside the keyed state (a bug or an unforeseen value).
STATE_FAILED = "STATE_FAILED"
PARKED = "not_before_ms long, parked binary"
MISSING_MASTER = "MASTER_DATA_MISSING"


@dataclass(frozen=True)
class Policy:
    """How the processor behaves (from EnricherSettings), picklable for the executors."""

    topics: EnricherTopics
    max_attempts: int
    backoff_ms: int
    backoff_max_ms: int
    dedup_window_ms: int
    #: The most quantities kept in a device's snapshot (``latest_values``).
    max_latest_values: int = 100

    def not_before(self, now_ms: int, attempt: int) -> int:
        """Return when attempt ``attempt + 1`` may run (exponential backoff, capped)."""
        return now_ms + min(self.backoff_ms * 2 ** (attempt - 1), self.backoff_max_ms)


class DeviceProcessor(StatefulProcessor):
    """Turns one device's decoded, normalized rows into output records (``OUTPUT``)."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy

    def init(self, handle: StatefulProcessorHandle) -> None:
        """Declare the state variables of a device."""
        self.handle = handle
        self.master = handle.getValueState("master", MASTER)
        self.device = handle.getValueState("device", DEVICE)
        self.parked = handle.getListState("parked", PARKED)
        self.dedup = DedupWindow(handle, self.policy.dedup_window_ms)
        # Sparkplug B metric definitions from the device's birth certificate (births.py).
        self.births = BirthCertificates(handle)
        self._cached_master: dict[str, Any] | None = None

    def handleInputRows(
        self, key: Any, rows: Iterator[Row], timerValues: TimerValues
    ) -> Iterator[Row]:
        """Process a batch of one device: master records first, then messages in log order."""
        now = timerValues.getCurrentProcessingTimeInMs()
        batch = sorted((r.asDict() for r in rows), key=_order)
        out: list[dict[str, Any]] = []
        # The key is (tenant, device): a device id is unique only within its tenant.
        snap = _Snapshot(self.device.get(), key[0], key[1], self.policy.max_latest_values)
        # Every state call is a round trip to the JVM: read master and parked once per
        # device and batch, not once per message (measured: the dominant cost).
        self._cached_master = self._load_master()
        had_master = self._cached_master is not None
        has_parked = self.parked.exists()
        ids = [
            dedup_key(m["message_id"], m["headers"])
            for m in batch
            if m["kind"] == "ingest" and m["error_stage"] != "decode"
        ]
        self.dedup.begin(ids, now)
        for msg in batch:
            if msg["kind"] == "master":
                self._master(msg, now, out)
            elif msg["error_stage"] == "decode":
                out += self._dead(msg, now, 1)
            elif not self.dedup.first_time(dedup_key(msg["message_id"], msg["headers"]), now):
                out.append(route.completion(self.policy.topics, msg, cpb.OUTCOME_DUPLICATE, now))
            elif msg["error_reason"]:
                out += self._dead(msg, now, 1)
            elif self._cached_master is None or has_parked:
                # Behind parked messages of the same device: keep its order.
                out += self._park(msg, now, 1, MISSING_MASTER)
                has_parked = True
            else:
                out += self._enrich(msg, now, 1, snap)
        if not had_master and self._cached_master is not None and has_parked:
            out += self._retry(now, snap, due_only=False)  # late master data: go now
        self.dedup.commit()
        return self._emit(out, snap, now)

    def _load_master(self) -> dict[str, Any] | None:
        m = self.master.get()
        if m is None:
            return None
        return {"site": m[0], "area_code": m[1], "vendor_format": m[2], "model": m[3]}

    def handleExpiredTimer(
        self, key: Any, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[Row]:
        """Retry the parked messages that are due."""
        now = timerValues.getCurrentProcessingTimeInMs()
        snap = _Snapshot(self.device.get(), key[0], key[1], self.policy.max_latest_values)
        self._cached_master = self._load_master()
        return self._emit(self._retry(now, snap, due_only=True), snap, now)

    def _emit(self, out: list[dict[str, Any]], snap: _Snapshot, now: int) -> Iterator[Row]:
        self.births.commit()
        if snap.changed:
            self.device.update(snap.value())
            out.append(route.device_state(self.policy.topics, snap.proto(now)))
        return iter([Row(**r) for r in out])

    def _master(self, msg: dict[str, Any], now: int, out: list[dict[str, Any]]) -> None:
        if msg["error_reason"]:
            out.append(route.dead_letter(self.policy.topics, msg, now))
        elif msg["master_deleted"]:
            self.master.clear()
            self._cached_master = None
        else:
            self.master.update((msg["site"], msg["area_code"], msg["vendor_format"], msg["model"]))
            self._cached_master = {
                k: msg[k] for k in ("site", "area_code", "vendor_format", "model")
            }

    def _dead(
        self, msg: dict[str, Any], now: int, attempts: int, **why: Any
    ) -> list[dict[str, Any]]:
        t = self.policy.topics
        dl = route.dead_letter(t, msg, now, attempts, **why)
        reason = why.get("reason") or msg["error_reason"]
        done = route.completion(t, msg, cpb.OUTCOME_DEAD_LETTERED, now, attempts, reason)
        return [dl, done]

    def _park(
        self, msg: dict[str, Any], now: int, attempt: int, reason: str
    ) -> list[dict[str, Any]]:
        t = self.policy.topics
        not_before = self.policy.not_before(now, attempt)
        row, value = route.parked(t, msg, attempt, not_before, reason)
        self.parked.appendValue((not_before, value))
        self.handle.registerTimer(not_before)
        done = route.completion(t, msg, cpb.OUTCOME_RETRY_SCHEDULED, now, attempt, reason)
        return [row, done]

    def _enrich(
        self, msg: dict[str, Any], now: int, attempt: int, snap: _Snapshot
    ) -> list[dict[str, Any]]:
        assert self._cached_master is not None
        try:
            msg = self.births.apply(msg)  # Sparkplug B aliases -> names, units, measurements
        except NormalizeError as exc:
            return self._dead(
                msg,
                now,
                attempt,
                stage="normalize",
                reason=exc.reason,
                error_class=type(exc).__name__,
                error_message=str(exc)[:1000],
            )
        try:
            evs = build_events(msg, self._cached_master)
            records = route.events(self.policy.topics, msg, evs)
        except Exception as exc:  # one message's unforeseen value must not stop the query
            return self._dead(
                msg,
                now,
                attempt,
                stage="enrich",
                reason=STATE_FAILED,
                error_class=type(exc).__name__,
                error_message=str(exc)[:1000],
            )
        snap.record(msg)
        done = route.completion(self.policy.topics, msg, cpb.OUTCOME_ENRICHED, now, attempt)
        return [*records, done]

    def _retry(self, now: int, snap: _Snapshot, due_only: bool) -> list[dict[str, Any]]:
        parked = sorted(self.parked.get(), key=lambda p: p[0]) if self.parked.exists() else []
        self.parked.clear()
        out: list[dict[str, Any]] = []
        for not_before, value in parked:
            if due_only and not_before > now:
                self.parked.appendValue((not_before, value))
                continue
            p = parked_message_pb2.ParkedMessage.FromString(value)
            msg = unpark(p)
            attempt = p.attempt + 1
            if self._cached_master is not None:
                out += self._enrich(msg, now, attempt, snap)
            elif attempt >= self.policy.max_attempts:
                out += self._dead(
                    msg,
                    now,
                    attempt,
                    stage="enrich",
                    reason=MISSING_MASTER,
                    error_class="MasterDataMissingError",
                    error_message=f"no master data for {p.device_id!r} after {attempt} attempts",
                )
            else:
                out += self._park(msg, now, attempt, MISSING_MASTER)
        return out


def unpark(p: parked_message_pb2.ParkedMessage) -> dict[str, Any]:
    """Rebuild the decoded, normalized row of a parked message from its original bytes."""
    headers = [{"key": h.key, "value": h.value} for h in p.original_headers]
    msg = decode_record(p.source.topic, p.device_id.encode(), p.original_value, headers, "")
    msg |= normalize_message(msg["content_type"], msg["payload"])
    msg |= {"src_topic": p.source.topic, "src_partition": p.source.partition}
    msg |= {"src_offset": p.source.offset, "value": p.original_value, "headers": headers}
    for k in ("alarm_code", "alarm_severity", "alarm_text", "measurements"):
        msg.setdefault(k, None)
    return msg


def _order(msg: dict[str, Any]) -> tuple[int, int, int, str, int, int]:
    # A total order, so a replay decides the same: master data first, then the device's own
    # order (sequence, device time; telemetry and alarms come on different topics), then log order.
    return (
        0 if msg["kind"] == "master" else 1,
        msg["sequence"] or 0,
        msg["device_time_ms"] or 0,
        msg["src_topic"],
        msg["src_partition"],
        msg["src_offset"],
    )


class _Snapshot:
    """The entity state of a device while a batch is processed.

    ``latest`` keeps at most ``max_latest`` quantities: device-chosen names would otherwise
    grow the state, and the snapshot record, until the producer refuses it. Quantities
    already kept keep updating; new ones past the cap are counted in ``dropped``.
    """

    def __init__(
        self, value: tuple[Any, ...] | None, tenant: str, device_id: str, max_latest: int = 100
    ) -> None:
        self.device_id = device_id
        self.changed = False
        self.max_latest = max_latest
        v = value or ("", 0, 0, 0, 0, "", "{}", 0)
        _, self.last_seen_ms, self.last_seq, self.gaps, self.count, self.last_id = v[:6]
        # The tenant is part of the key: it can never flip to another tenant's.
        self.tenant = tenant or ""
        self.latest: dict[str, list[Any]] = json.loads(v[6] or "{}")
        self.dropped: int = (v[7] if len(v) > 7 else 0) or 0

    def record(self, msg: dict[str, Any]) -> None:
        """Fold one enriched message into the snapshot."""
        self.changed = True
        self.count += 1
        seq = msg["sequence"] or 0
        if seq and self.last_seq and seq > self.last_seq + 1:
            self.gaps += seq - self.last_seq - 1
        self.last_seq = max(self.last_seq, seq)
        if (msg["device_time_ms"] or 0) >= self.last_seen_ms:
            self.last_seen_ms = msg["device_time_ms"] or 0
            self.last_id = msg["message_id"]
            for m in msg["measurements"] or []:
                name = m["name"]
                if name in self.latest or (
                    len(self.latest) < self.max_latest and len(name) <= MAX_NAME_CHARS
                ):
                    self.latest[name] = [m["value"], m["unit"]]
                else:
                    self.dropped += 1

    def value(self) -> tuple[Any, ...]:
        """Return the ValueState tuple."""
        latest = json.dumps(self.latest, sort_keys=True)
        return (
            self.tenant,
            self.last_seen_ms,
            self.last_seq,
            self.gaps,
            self.count,
            self.last_id,
            latest,
            self.dropped,
        )

    def proto(self, now_ms: int) -> device_state_pb2.DeviceState:
        """Return the snapshot published to the entity topic."""
        s = device_state_pb2.DeviceState(
            device_id=self.device_id,
            tenant=self.tenant,
            last_sequence=self.last_seq,
            gaps_detected=self.gaps,
            message_count=self.count,
            last_message_id=self.last_id,
            latest_values_dropped=self.dropped,
        )
        s.last_seen_time.FromMilliseconds(self.last_seen_ms)
        s.updated_time.FromMilliseconds(now_ms)
        for name in sorted(self.latest):
            value, unit = self.latest[name]
            s.latest_values.add(name=name, value=value, unit=unit)
        return s


def process_devices(df: DataFrame, policy: Policy) -> DataFrame:
    """Run the keyed state over decoded, normalized rows; return the ``OUTPUT`` records."""
    # Keyed by tenant and device: device ids (and message ids) are unique per tenant only,
    # so state, master data and the dedup window must never be shared across tenants.
    return df.groupBy("tenant", "device_key").transformWithState(
        statefulProcessor=DeviceProcessor(policy),
        outputStructType=OUTPUT,
        outputMode="Append",
        timeMode="ProcessingTime",
    )
