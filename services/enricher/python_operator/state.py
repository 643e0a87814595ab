"""Per-device keyed state: decode, dedupe, master data, parked retries and the entity snapshot.

One ``transformWithState`` operator keyed by (tenant, device id) does all of it, because
the per-key cost of the operator dominates (measured: ~0.7 ms per key per batch
row-based, ~2.3 ms with pandas), so several operators would multiply it. It takes the
raw Kafka records (the key computed in the JVM, ``decode.key_columns``) and decodes and
normalizes them itself: one Python hop instead of three (docs/enricher.md). Master data
arrives as a stream on the same key, so lookups never leave the partition and late
master data reaches parked messages.

A device's state is one composite value (``DEVICE``: master data, snapshot, recent ids,
how many messages are parked), read once and written at most once per batch: every state
call is a round trip to the JVM (~80 us, SPARK-52333). The parked messages (a list), the
older ids (a map by hour, ``dedupe.py``) and Sparkplug B definitions (``births.py``) are
touched only by the devices that need them.
"""

from __future__ import annotations

import json
import time
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

from headwater.enricher.driver.settings import EnricherTopics
from headwater.enricher.executor.arrowsafe import sanitize
from headwater.enricher.executor.decode import decode_record, decode_row
from headwater.enricher.executor.formats.base import NormalizeError
from headwater.enricher.executor.normalize import normalize_message
from headwater.enricher.executor.schema import OUTPUT
from headwater.enricher.executor.timestamps import set_ms
from headwater.enricher.python_operator import route
from headwater.enricher.python_operator.births import BirthCertificates
from headwater.enricher.python_operator.dedupe import (
    HOUR_MS,
    OLDER_KEY,
    OLDER_VALUE,
    Dedup,
    dedup_key,
)
from headwater.enricher.python_operator.enrich import build_events
from headwater.enricher.python_operator.profile import TaskProfile
from headwater.proto.events.v1 import completion_pb2 as cpb
from headwater.proto.events.v1 import device_state_pb2, parked_message_pb2

MASTER_FIELDS = ("site", "area_code", "vendor_format", "model")
#: The composite value of a device; see ``DeviceValue``.
DEVICE = (
    "site string, area_code string, vendor_format string, model string, has_master boolean, "
    "last_seen_ms long, last_sequence long, gaps long, message_count long, "
    "last_message_id string, latest string, latest_dropped long, "
    "recent_ids binary, spilled_hours binary, parked int"
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
    #: How long message ids are remembered at all (older ids by device-time hour).
    dedup_horizon_ms: int = 7 * 24 * HOUR_MS + HOUR_MS
    #: Where each task writes its profile line ("" = not measured), see ``profile.py``.
    profile_dir: str = ""

    def not_before(self, now_ms: int, attempt: int) -> int:
        """Return when attempt ``attempt + 1`` may run (exponential backoff, capped)."""
        return now_ms + min(self.backoff_ms * 2 ** (attempt - 1), self.backoff_max_ms)


class DeviceValue:
    """A device's composite state value while a batch (or a timer) is processed."""

    def __init__(
        self,
        master: dict[str, Any] | None,
        snapshot: _Snapshot,
        recent_ids: bytes | None = None,
        spilled_hours: bytes | None = None,
        parked: int = 0,
    ) -> None:
        self.master = master
        self.snapshot = snapshot
        self.recent_ids = recent_ids
        self.spilled_hours = spilled_hours
        #: How many messages of the device are parked (0: the list is never read).
        self.parked = parked
        #: Whether something other than the snapshot changed (master, ids, parked).
        self.changed = False

    @classmethod
    def of(
        cls, value: tuple[Any, ...] | None, tenant: str, device_id: str, max_latest: int
    ) -> DeviceValue:
        """Return the device's value from its state tuple (None: a new device)."""
        if value is None:
            return cls(None, _Snapshot(None, tenant, device_id, max_latest))
        master = dict(zip(MASTER_FIELDS, value[:4], strict=True)) if value[4] else None
        snap = _Snapshot(value[5:12], tenant, device_id, max_latest)
        return cls(master, snap, value[12], value[13], value[14] or 0)

    def value(self) -> tuple[Any, ...]:
        """Return the state tuple (``DEVICE``)."""
        m = self.master or {}
        return (
            *(m.get(k) for k in MASTER_FIELDS),
            self.master is not None,
            *self.snapshot.value(),
            self.recent_ids,
            self.spilled_hours,
            self.parked,
        )


class DeviceProcessor(StatefulProcessor):
    """Turns one device's raw rows (``decode.key_columns``) into output records (``OUTPUT``)."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy

    def init(self, handle: StatefulProcessorHandle) -> None:
        """Declare the state variables of a device."""
        self.handle = handle
        self.device = handle.getValueState("device", DEVICE)
        self.parked = handle.getListState("parked", PARKED)
        older = handle.getMapState(
            "older_ids", OLDER_KEY, OLDER_VALUE, self.policy.dedup_horizon_ms + HOUR_MS
        )
        self.dedup = Dedup(older, self.policy.dedup_window_ms, self.policy.dedup_horizon_ms)
        # Sparkplug B metric definitions from the device's birth certificate (births.py).
        self.births = BirthCertificates(handle)
        self.profile = TaskProfile(self.policy.profile_dir) if self.policy.profile_dir else None

    def close(self) -> None:
        """Write this task's profile line (when profiling is on)."""
        if self.profile is not None:
            self.profile.write()

    def handleInputRows(
        self, key: Any, rows: Iterator[Row], timerValues: TimerValues
    ) -> Iterator[Row]:
        """Process a batch of one device: master records first, then messages in order."""
        t0 = time.perf_counter_ns()
        now = timerValues.getCurrentProcessingTimeInMs()
        master_topic = self.policy.topics.master
        batch = sorted((decode_row(r, master_topic) for r in rows), key=_order)
        t1 = self._phase("decode", t0)
        if self.profile is not None:
            self.profile.counts["rows_in"] += len(batch)
        # One composite value per device: every state call is a round trip to the JVM,
        # so master data, snapshot, recent ids and the parked count are read once.
        dev = DeviceValue.of(self.device.get(), key[0], key[1], self.policy.max_latest_values)
        fresh = [m for m in batch if m["kind"] == "ingest" and m["error_stage"] != "decode"]
        self.dedup.begin(
            dev.recent_ids,
            dev.spilled_hours,
            [(m.setdefault("dedup_key", dedup_key(m)), m["device_time_ms"]) for m in fresh],
        )
        t1 = self._phase("state", t1, calls=1 + self.dedup.calls)
        had_master = dev.master is not None
        out: list[dict[str, Any]] = []
        for msg in batch:
            try:
                out += self._message(msg, now, dev)
            except Exception as exc:  # a bug or an unforeseen value: that message only
                out += self._dead(msg, now, 1, **_failure("state", STATE_FAILED, exc))
        if not had_master and dev.master is not None and dev.parked:
            out += self._retry(now, dev, due_only=False)  # late master data: go now
        return self._emit(out, dev, now, t1)

    def _message(self, msg: dict[str, Any], now: int, dev: DeviceValue) -> list[dict[str, Any]]:
        if msg["kind"] == "master":
            return self._master(msg, now, dev)
        if msg["error_stage"] == "decode":
            return self._dead(msg, now, 1)
        key = msg.get("dedup_key") or dedup_key(msg)
        if not self.dedup.first_time(key, msg["device_time_ms"], now):
            return [route.completion(self.policy.topics, msg, cpb.OUTCOME_DUPLICATE, now)]
        if msg["error_reason"]:
            return self._dead(msg, now, 1)
        if dev.master is None or dev.parked:
            # Behind parked messages of the same device: keep its order.
            return self._park(msg, now, 1, MISSING_MASTER, dev)
        return self._enrich(msg, now, 1, dev)

    def handleExpiredTimer(
        self, key: Any, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[Row]:
        """Retry the parked messages that are due."""
        t0 = time.perf_counter_ns()
        now = timerValues.getCurrentProcessingTimeInMs()
        dev = DeviceValue.of(self.device.get(), key[0], key[1], self.policy.max_latest_values)
        self.dedup.begin(dev.recent_ids, dev.spilled_hours, ())
        t0 = self._phase("state", t0, calls=1)
        return self._emit(self._retry(now, dev, due_only=True), dev, now, t0)

    def _phase(self, phase: str, since_ns: int, calls: int = 0) -> int:
        if self.profile is None:
            return since_ns
        self.profile.counts["state_calls"] += calls
        return self.profile.add(phase, since_ns)

    def _nested_state(self, since_ns: int, calls: int) -> None:
        """Count state calls made inside the logic phase as state time, not logic."""
        if self.profile is not None:
            spent = time.perf_counter_ns() - since_ns
            self.profile.ns["state"] += spent
            self.profile.ns["logic"] -= spent  # the logic phase's span includes them
            self.profile.counts["state_calls"] += calls

    def _emit(
        self, out: list[dict[str, Any]], dev: DeviceValue, now: int, since_ns: int
    ) -> Iterator[Row]:
        t = self._phase("logic", since_ns)
        births_calls = self.births.commit()
        ids = self.dedup.commit(now)
        if ids is not None:
            dev.recent_ids, dev.spilled_hours = ids
            dev.changed = True
        if dev.snapshot.changed:
            out.append(route.device_state(self.policy.topics, dev.snapshot.proto(now)))
        if dev.changed or dev.snapshot.changed:
            self.device.update(dev.value())
        writes = int(dev.changed or dev.snapshot.changed)
        t = self._phase("state", t, calls=births_calls + self.dedup.calls + writes)
        self.dedup.calls = 0
        rows = [Row(**r) for r in out]
        if self.profile is not None:
            self.profile.batch_ms = now
            self.profile.counts.update(keys=1, rows_out=len(rows))
            self._phase("emit", t)
        return iter(rows)

    def _master(self, msg: dict[str, Any], now: int, dev: DeviceValue) -> list[dict[str, Any]]:
        if msg["error_reason"]:
            return [route.dead_letter(self.policy.topics, msg, now)]
        dev.changed = True
        if msg["master_deleted"]:
            dev.master = None
        else:
            dev.master = {k: msg[k] for k in MASTER_FIELDS}
        return []

    def _dead(
        self, msg: dict[str, Any], now: int, attempts: int, **why: Any
    ) -> list[dict[str, Any]]:
        t = self.policy.topics
        dl = route.dead_letter(t, msg, now, attempts, **why)
        reason = why.get("reason") or msg["error_reason"]
        done = route.completion(t, msg, cpb.OUTCOME_DEAD_LETTERED, now, attempts, reason)
        return [dl, done]

    def _park(
        self, msg: dict[str, Any], now: int, attempt: int, reason: str, dev: DeviceValue
    ) -> list[dict[str, Any]]:
        t = self.policy.topics
        not_before = self.policy.not_before(now, attempt)
        row, value = route.parked(t, msg, attempt, not_before, reason)
        t0 = time.perf_counter_ns()
        self.parked.appendValue((not_before, value))
        self.handle.registerTimer(not_before)
        self._nested_state(t0, calls=2)
        dev.parked += 1
        dev.changed = True
        done = route.completion(t, msg, cpb.OUTCOME_RETRY_SCHEDULED, now, attempt, reason)
        return [row, done]

    def _enrich(
        self, msg: dict[str, Any], now: int, attempt: int, dev: DeviceValue
    ) -> list[dict[str, Any]]:
        assert dev.master is not None
        try:
            msg = self.births.apply(msg)  # Sparkplug B aliases -> names, units, measurements
        except NormalizeError as exc:
            return self._dead(msg, now, attempt, **_failure("normalize", exc.reason, exc))
        try:
            evs = build_events(msg, dev.master)
            records = route.events(self.policy.topics, msg, evs)
        except Exception as exc:  # one message's unforeseen value must not stop the query
            return self._dead(msg, now, attempt, **_failure("enrich", STATE_FAILED, exc))
        dev.snapshot.record(msg)
        done = route.completion(self.policy.topics, msg, cpb.OUTCOME_ENRICHED, now, attempt)
        return [*records, done]

    def _retry(self, now: int, dev: DeviceValue, due_only: bool) -> list[dict[str, Any]]:
        parked = sorted(self.parked.get(), key=lambda p: p[0]) if dev.parked else []
        self.parked.clear()
        dev.parked, dev.changed = 0, True
        out: list[dict[str, Any]] = []
        for not_before, value in parked:
            if due_only and not_before > now:
                self.parked.appendValue((not_before, value))
                dev.parked += 1
                continue
            p = parked_message_pb2.ParkedMessage.FromString(value)
            msg = unpark(p)
            attempt = p.attempt + 1
            if dev.master is not None:
                out += self._enrich(msg, now, attempt, dev)
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
                out += self._park(msg, now, attempt, MISSING_MASTER, dev)
        return out


def _failure(stage: str, reason: str, exc: BaseException) -> dict[str, Any]:
    """Return the dead-letter fields of an exception raised while handling one message."""
    return {
        "stage": stage,
        "reason": reason,
        "error_class": type(exc).__name__,
        "error_message": sanitize(str(exc)[:1000]),
    }


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
    The tenant is part of the state's key, never of the value: it cannot flip.
    """

    def __init__(
        self, value: tuple[Any, ...] | None, tenant: str, device_id: str, max_latest: int = 100
    ) -> None:
        self.device_id = device_id
        self.tenant = tenant or ""
        self.changed = False
        self.max_latest = max_latest
        v = value or (0, 0, 0, 0, "", "{}", 0)
        self.last_seen_ms, self.last_seq, self.gaps, self.count, self.last_id = v[:5]
        self.latest: dict[str, list[Any]] = json.loads(v[5] or "{}")
        self.dropped: int = v[6] or 0

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
        """Return the snapshot's part of the state tuple (``DEVICE``)."""
        latest = json.dumps(self.latest, sort_keys=True)
        return (
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
        set_ms(s.last_seen_time, self.last_seen_ms)
        set_ms(s.updated_time, now_ms)
        for name in sorted(self.latest):
            value, unit = self.latest[name]
            s.latest_values.add(name=name, value=value, unit=unit)
        return s


def process_devices(keyed: DataFrame, policy: Policy) -> DataFrame:
    """Run the keyed state over raw rows (``decode.key_columns``); return ``OUTPUT`` records."""
    # Keyed by tenant and device: device ids (and message ids) are unique per tenant only,
    # so state, master data and the dedup window must never be shared across tenants.
    return keyed.groupBy("tenant", "device_key").transformWithState(
        statefulProcessor=DeviceProcessor(policy),
        outputStructType=OUTPUT,
        outputMode="Append",
        timeMode="ProcessingTime",
    )
