"""Benchmark: the keyed state's Python work per message, without Spark.

``python -m headwater.enricher.bench.python_operator`` runs ``state.DeviceProcessor`` over
``--messages`` benchmark records of ``--devices`` devices (the records of ``query.py``), as
one micro-batch per repetition, with each state variable held in memory instead of in
Spark's state store. It prints microseconds per message (min and median of ``--repeat``
runs): decoding, normalizing, dedup, enrichment, routing and building the output rows,
everything the enricher does per message in Python except PySpark's own Arrow conversion
and the state calls' round trips (those are in ``query.py``'s profile). Quick enough to
run before and after a change to the hot path; ``--profile`` adds cProfile's top entries.

``--normalize`` measures the normalize step alone instead: ``normalize_message`` per
message of the same records, and what its budget (``budget.py``: the CPU timer armed and
disarmed, the size checks) adds to each call, against the same normalizer called bare.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
import time
from typing import Any

from headwater.enricher.bench.query import telemetry_record
from headwater.enricher.driver.settings import EnricherTopics
from headwater.enricher.python_operator.state import DeviceProcessor, DeviceValue, Policy


class _Value:
    """A ValueState held in memory; the processor's current device is swapped in per key."""

    def __init__(self, value: tuple[Any, ...] | None = None) -> None:
        self.value = value

    def get(self) -> tuple[Any, ...] | None:
        return self.value

    def update(self, value: tuple[Any, ...]) -> None:
        self.value = value


class _List:
    def __init__(self) -> None:
        self.values: list[Any] = []

    def get(self) -> Any:
        return iter(self.values)

    def appendValue(self, value: Any) -> None:
        self.values.append(value)

    def clear(self) -> None:
        self.values = []


class _Map:
    def __init__(self) -> None:
        self.values: dict[Any, Any] = {}

    def getValue(self, key: Any) -> Any:
        return self.values.get(key)

    def updateValue(self, key: Any, value: Any) -> None:
        self.values[key] = value

    def removeKey(self, key: Any) -> None:
        self.values.pop(key, None)

    def containsKey(self, key: Any) -> bool:
        return key in self.values


class _Handle:
    def getValueState(self, *_: Any) -> _Value:
        return _Value()

    def getListState(self, *_: Any) -> _List:
        return _List()

    def getMapState(self, *_: Any) -> _Map:
        return _Map()

    def registerTimer(self, _: int) -> None:
        pass


class _Timers:
    def __init__(self, now_ms: int) -> None:
        self.now_ms = now_ms

    def getCurrentProcessingTimeInMs(self) -> int:
        return self.now_ms


def batch(run: str, messages: int, devices: int, topic: str, now_ms: int) -> dict[str, list]:
    """Return one micro-batch of keyed rows (``schema.KEYED``) by device, fresh message ids."""
    rows: dict[str, list[tuple[Any, ...]]] = {}
    for i in range(messages):
        key, value, headers = telemetry_record(i, devices, run, now_ms)
        device = key.decode()
        hdrs = [{"key": k, "value": v} for k, v in headers]  # as PySpark hands structs over
        rows.setdefault(device, []).append(("bench", device, topic, 0, i, value, hdrs))
    return rows


def normalize_figures(messages: int, repeat: int) -> dict[str, float]:
    """Return CPU µs per message (medians of ``repeat`` runs) of normalize and its budget.

    ``normalize_message`` is the whole step; ``bare`` calls the same normalizer and
    ``columns`` (with its result size checks) directly; ``wrapper`` is the difference (the
    format lookup, the payload size check, ``budget.call``, the encodability pre-check),
    and ``timer`` the cost of ``budget.call`` around a call that does nothing: the CPU
    budget's own share.
    """
    from headwater.enricher.executor import budget as budgets
    from headwater.enricher.executor import media_type
    from headwater.enricher.executor.formats.registry import lookup
    from headwater.enricher.executor.normalize import columns, normalize_message
    from headwater.proto.device.v1 import device_message_pb2

    msgs = []
    for i in range(messages):
        _, value, _ = telemetry_record(i, 1000, "n", 0)
        dm = device_message_pb2.DeviceMessage.FromString(value)
        msgs.append((dm.content_type, dm.payload))
    b = budgets.current()
    fn = lookup(media_type.parse(msgs[0][0]).essence)
    assert fn is not None
    normalize_message(*msgs[0])  # first use: plugins, the units registry

    def whole() -> None:
        for ct, payload in msgs:
            normalize_message(ct, payload)

    def bare() -> None:
        for ct, payload in msgs:
            columns(fn(payload, media_type.parse(ct)), b)

    def timer() -> None:
        nothing = lambda: None  # noqa: E731
        for _ in msgs:
            budgets.call(b, nothing)

    # CPU time of this thread, and the variants taken in turns: on a shared machine the
    # wall clock and the order of long runs would say more about the neighbours.
    variants = {"normalize_message": whole, "bare": bare, "timer": timer}
    runs: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeat):
        for name, f in variants.items():
            t0 = time.thread_time()
            f()
            runs[name].append((time.thread_time() - t0) * 1e6 / messages)
    out = {name: statistics.median(r) for name, r in runs.items()}
    out["wrapper"] = out["normalize_message"] - out["bare"]
    return out


def main(argv: list[str] | None = None) -> int:
    """Print µs per message of the keyed state's Python work."""
    parser = argparse.ArgumentParser(
        prog="python -m headwater.enricher.bench.python_operator",
        description=__doc__.split("\n")[0],
    )
    parser.add_argument("--devices", type=int, default=1000)
    parser.add_argument("--messages", type=int, default=15_000, help="messages per batch")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--profile", action="store_true", help="print cProfile's top 25")
    parser.add_argument(
        "--normalize", action="store_true", help="measure the normalize step and its budget only"
    )
    args = parser.parse_args(argv)
    if args.normalize:
        figures = normalize_figures(args.messages, args.repeat)
        print(
            f"{args.messages} messages, median µs/message: "
            + ", ".join(f"{k} {v:.2f}" for k, v in figures.items())
        )
        return 0

    topics = EnricherTopics.with_prefix("bench.")
    policy = Policy(
        topics=topics,
        max_attempts=3,
        backoff_ms=1000,
        backoff_max_ms=60_000,
        dedup_window_ms=3_600_000,
    )
    processor = DeviceProcessor(policy)
    processor.init(_Handle())  # type: ignore[arg-type]
    now = int(time.time() * 1000)
    master = {"site": "plant-1", "area_code": "A1", "vendor_format": "", "model": ""}
    states: dict[str, _Value] = {}

    def run(rows: dict[str, list]) -> int:
        out = 0
        for device, device_rows in rows.items():
            if device not in states:  # every device has master data, as in query.py
                value = DeviceValue.of(None, "bench", device, policy.max_latest_values)
                value.master = master
                states[device] = _Value(value.value())
            processor.device = states[device]  # type: ignore[assignment]
            key = ("bench", device)
            out += sum(1 for _ in processor.handleInputRows(key, iter(device_rows), _Timers(now)))
        return out

    ingest = topics.ingest[0]
    run(batch("warm", args.messages, args.devices, ingest, now))  # first batch: new devices
    seconds, rows_out = [], 0
    for rep in range(args.repeat):
        rows = batch(f"r{rep}", args.messages, args.devices, ingest, now)
        t0 = time.perf_counter()
        rows_out = run(rows)
        seconds.append(time.perf_counter() - t0)
    per_msg = [s * 1e6 / args.messages for s in seconds]
    print(
        f"{args.messages} messages of {args.devices} devices -> {rows_out} rows: "
        f"min {min(per_msg):.1f} µs/message, median {statistics.median(per_msg):.1f}"
    )
    if args.profile:
        rows = batch("profile", args.messages, args.devices, ingest, now)
        prof = cProfile.Profile()
        prof.runcall(run, rows)
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    return 0


if __name__ == "__main__":
    sys.exit(main())
