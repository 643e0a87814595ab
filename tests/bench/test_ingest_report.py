"""The ingest benchmark's CPU per message: the arithmetic, the table cell and the verdict lines."""

from __future__ import annotations

import pytest

from headwater_dev.bench.loadgen import Measured
from headwater_dev.bench.report import (
    CPU_PROCESSES,
    Row,
    cpu_cell,
    cpu_lines,
    cpu_us_per_msg,
    make_row,
    verdicts,
)


def test_cpu_per_message_is_the_delta_over_the_messages_in_microseconds() -> None:
    before = {"load_gen": 10.0, "broker": None, "echo": 2.0, "server": 5.0}
    after = {"load_gen": 11.25, "broker": None, "echo": 2.0, "server": 10.25}
    assert cpu_us_per_msg(before, after, 10_000) == {
        "load_gen": 125.0,
        "broker": None,  # --bootstrap: not measurable
        "echo": 0.0,
        "server": 525.0,
    }
    # No message answered: no per-message figure.
    assert set(cpu_us_per_msg(before, after, 0).values()) == {None}


def test_cpu_cell_keeps_the_process_order_and_marks_what_was_not_measured() -> None:
    assert CPU_PROCESSES == ("load_gen", "broker", "echo", "server")
    cpu = {"server": 512.4, "echo": 0.04, "broker": None, "load_gen": 125.0}
    assert cpu_cell(cpu) == "125 / - / 0.0 / 512"
    assert cpu_cell(None) == "-"


def _row(key: str, rate: float, cpu: dict[str, float | None] | None) -> Row:
    m = Measured(messages=int(rate * 10), seconds=10.0, latencies_s=[0.001, 0.002])
    return make_row(key, key, "info", 200, m, None, cpu)


def _rows(broker: float | None = 200.0) -> list[Row]:
    echo_broker = None if broker is None else 5.0
    return [
        _row("raw_aiokafka", 20_000, None),
        _row("raw_aiokafka_bare", 22_000, None),
        _row("raw_confluent", 30_000, None),
        _row(
            "echo_single", 4_000, {"load_gen": 125, "broker": echo_broker, "echo": 165, "server": 5}
        ),
        _row("echo_batch", 40_000, None),
        _row("single", 1_600, {"load_gen": 130, "broker": broker, "echo": 0.1, "server": 520}),
        _row("batch", 20_000, None),
        _row("stream", 20_000, None),
    ]


def test_verdicts_set_the_servers_cpu_per_single_call_against_the_echo_servers() -> None:
    lines = {t["target"]: t for t in verdicts(_rows(), None)}
    server = lines["server CPU per single call <= 2x the bare echo server's"]
    assert server["value"] == "520 µs = 3.15x the bare echo server's 165 µs"
    assert server["verdict"] == "MISSED" and server["payload"] == 200
    ceiling = next(t for k, t in lines.items() if k.startswith("single-call rate / echo"))
    # (125 + 5 + 165 + 5) / (130 + 200 + 165) = 300 / 495
    assert ceiling["value"].startswith(f"{300 / 495:.0%} = echo phase 300 µs CPU/call")
    assert "load gen 130 + broker 200 + echo server 165" in ceiling["value"]
    assert ceiling["verdict"] == "info"
    # The targets are as before: the rate ratio is still judged on the measured rates.
    assert lines["single-message rate >= 60% of bare echo"]["value"] == "40%"
    assert lines["single-message rate >= 60% of bare echo"]["verdict"] == "MISSED"


def test_without_the_brokers_cpu_the_ceiling_says_so() -> None:
    ceiling = [t for t in verdicts(_rows(broker=None), None) if "rate / echo" in t["target"]]
    assert len(ceiling) == 1
    # (125 + 165 + 5) / (130 + 165): the broker is left out of both sides.
    assert ceiling[0]["value"].startswith(f"{295 / 295:.0%} = echo phase 295 µs")
    assert "broker not measured" in ceiling[0]["value"]


@pytest.mark.parametrize(("server_us", "verdict"), [(330.0, "met"), (331.0, "MISSED")])
def test_the_server_cpu_target_is_met_at_twice_the_echo_servers(
    server_us: float, verdict: str
) -> None:
    rows = _rows()
    rows[5] = _row(
        "single", 1_600, {"load_gen": 130, "broker": 200, "echo": 0.1, "server": server_us}
    )
    line = next(t for t in verdicts(rows, None) if t["target"].startswith("server CPU"))
    assert line["verdict"] == verdict


def test_batches_are_judged_against_one_and_a_half_times_raw_aiokafka() -> None:
    rows = _rows()  # batch 20,000 msgs/s against raw aiokafka's 20,000: 100%
    line = next(t for t in verdicts(rows, None) if t["target"].startswith("batch rate >="))
    assert line["target"] == "batch rate >= 150% of raw aiokafka"
    assert (line["value"], line["verdict"]) == ("100%", "MISSED")
    rows[6] = _row("batch", 30_000, None)
    line = next(t for t in verdicts(rows, None) if t["target"].startswith("batch rate >="))
    assert (line["value"], line["verdict"]) == ("150%", "met")


@pytest.mark.parametrize("echo_cpu", [None, {"load_gen": 1.0, "echo": 0.0}])
def test_no_cpu_lines_without_the_echo_servers_cpu(echo_cpu: dict | None) -> None:
    echo = _row("echo_single", 4_000, echo_cpu)
    single = _row("single", 1_600, {"load_gen": 130, "server": 520})
    assert cpu_lines(echo, single) == []
