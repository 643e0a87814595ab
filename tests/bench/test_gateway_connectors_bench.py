"""``headwater bench gateway-connectors`` end to end on small counts: the report's shape, and
every value offered at the edge acknowledged by ingest, for each connector.

Bounded in count and time; no timing assertions (speed is read from the printed numbers).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from headwater_dev.edge.mosquitto import MISSING, installed

#: 200 registers: two blocks of reads per poll (at most 125 registers a read).
MQTT_VALUES, OPCUA_ITEMS, OPCUA_VALUES, REGISTERS, POLLS = 300, 20, 100, 200, 3
#: The MQTT load from publishers in processes of their own, sharing it unevenly (300 / 7).
PUBLISHERS = 7


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "headwater.cli", "bench", "gateway-connectors", *args],
        capture_output=True,
        text=True,
        timeout=240,
    )


def test_each_connector_reports_and_every_value_is_acked(kafka_bootstrap: str) -> None:
    if installed() is None:
        pytest.fail(MISSING)
    result = _bench(
        "--bootstrap", kafka_bootstrap, "--json", "--phase-timeout", "60",
        "--mqtt-values", str(MQTT_VALUES), "--mqtt-publishers", str(PUBLISHERS),
        "--opcua-items", str(OPCUA_ITEMS),
        "--opcua-values", str(OPCUA_VALUES), "--modbus-registers", str(REGISTERS),
        "--modbus-polls", str(POLLS), "--modbus-interval", "0.2",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "verdict" in result.stdout  # the printed targets table
    report = json.loads(result.stdout.strip().splitlines()[-1])
    connectors = report["connectors"]
    assert set(connectors) == {"mqtt", "opcua", "modbus"}
    # What each phase offered at the edge: its warm-up or initial values, then the load.
    assert connectors["mqtt"]["values_offered"] == connectors["mqtt"]["warmup_values"] + MQTT_VALUES
    assert connectors["mqtt"]["publishers"] == PUBLISHERS
    assert connectors["opcua"]["values_offered"] == OPCUA_ITEMS + OPCUA_VALUES
    assert connectors["modbus"]["values_offered"] >= (POLLS + 1) * REGISTERS
    for name, figures in connectors.items():
        assert figures["values_acked"] == figures["values_spooled"] == figures["values_offered"], (
            name
        )
        assert figures["lost"] == {}, name
        assert figures["connector_errors"] == 0, name
        assert figures["acked_per_s"] > 0 and figures["seconds"] > 0, name
        assert figures["gateway_cpu_us_per_value"] >= 0, name
        assert 0 <= figures["gateway_core_busy_share"] <= 1, name
        assert 0 <= figures["machine_busy_share"] <= 1, name
        # One gateway process on one core.
        assert figures["gateway_cpus_allowed"] == str(report["options"]["cpu"]), name
    modbus = connectors["modbus"]
    # Each poll's start is timed once, not once per block of reads.
    assert 0 <= modbus["polls_seen_by_device"] - modbus["polls_spooled"] <= 1, modbus
    lateness = modbus["lateness"]
    assert lateness["polls"] == POLLS
    assert lateness["min_ms"] <= lateness["p50_ms"] <= lateness["p99_ms"] <= lateness["max_ms"]
    verdicts = {t["target"]: t["verdict"] for t in report["targets"]}
    assert len(verdicts) == 3 + 2 * 3
    for name in ("MQTT", "OPC UA", "Modbus"):
        assert verdicts[f"{name}: every value offered at the edge acked by ingest"] == "met"
    # Below the load the throughput and jitter targets are information only.
    assert sorted(verdicts.values()).count("info") == 3 + 3


def test_a_bad_count_is_refused_in_one_line() -> None:
    result = _bench("--modbus-polls", "0")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].endswith("0 is not a positive count")
