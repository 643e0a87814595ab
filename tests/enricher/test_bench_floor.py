"""The benchmark's keyed-state floor does the enricher's state calls and nothing else."""

from __future__ import annotations

from typing import Any

from headwater.enricher.bench_floor import FloorProcessor
from headwater.enricher.schema import OUTPUT, field_names


class _Value:
    def __init__(self) -> None:
        self.value: tuple[Any, ...] | None = None
        self.calls = 0

    def get(self) -> tuple[Any, ...] | None:
        self.calls += 1
        return self.value

    def update(self, value: tuple[Any, ...]) -> None:
        self.calls += 1
        self.value = value


class _Handle:
    def __init__(self) -> None:
        self.state = _Value()

    def getValueState(self, name: str, schema: str) -> _Value:
        return self.state


class _Timers:
    def getCurrentProcessingTimeInMs(self) -> int:
        return 1_700_000_000_000


def test_one_record_per_ingest_record_and_two_state_calls_per_device() -> None:
    floor, handle = FloorProcessor("p.completions", "p.master"), _Handle()
    floor.init(handle)  # type: ignore[arg-type]
    headers = [{"key": "headwater-received-at-ms", "value": b"1"}]
    rows = [
        ("t", "d1", "p.ingest.telemetry", 0, 7, b"x", headers),
        ("t", "d1", "p.master", 1, 3, b"m", []),
        ("t", "d1", "p.ingest.telemetry", 0, 8, b"y", headers),
    ]
    for _ in range(2):  # two batches of the same device
        out = list(floor.handleInputRows(("t", "d1"), iter(rows), _Timers()))  # type: ignore[arg-type]
        assert [r.ref for r in out] == ["p.ingest.telemetry/0/7", "p.ingest.telemetry/0/8"]
        assert {r.topic for r in out} == {"p.completions"}
        assert out[0].headers == headers  # the watch reads received-at from them
        assert list(out[0].asDict()) == field_names(OUTPUT)
    assert handle.state.value == (4,)
    assert handle.state.calls == 4  # one read and one write per device and batch
