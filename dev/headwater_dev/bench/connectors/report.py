"""The connectors benchmark's targets (issue 39) with their figures and met/missed, and its text.

A throughput or jitter target is judged only at the issue's load (1,000 OPC UA items;
1,000 Modbus registers every second) and with at least a second's worth of values at the
target rate: otherwise its line is information. That
every value offered at the edge was acknowledged by ingest is judged at every load.
"""

from __future__ import annotations

from typing import Any

from headwater_dev.bench.cli import render
from headwater_dev.bench.report import machine_line

MQTT_VALUES_PER_S = 10_000
OPCUA_CHANGES_PER_S = 5_000
OPCUA_ITEMS = 1000
MODBUS_REGISTERS = 1000
MODBUS_INTERVAL_S = 1.0
MODBUS_P99_MS = 50

NAMES = {"mqtt": "MQTT", "opcua": "OPC UA", "modbus": "Modbus"}


def targets(connectors: dict[str, Any], opts: Any) -> list[dict[str, Any]]:
    """Each target's line: {target, value, verdict} (verdict met, MISSED or info)."""
    out: list[dict[str, Any]] = []

    def add(target: str, value: str, met: bool | None) -> None:
        verdict = "info" if met is None else ("met" if met else "MISSED")
        out.append({"target": target, "value": value, "verdict": verdict})

    def at_load(met: bool, issue_load: bool) -> bool | None:
        return met if issue_load else None

    mqtt, opcua, modbus = connectors["mqtt"], connectors["opcua"], connectors["modbus"]
    add(
        f"MQTT >= {MQTT_VALUES_PER_S:,} values/s, edge to acked by ingest, one core",
        f"{mqtt['acked_per_s']:,}/s (published at {mqtt['offered_per_s']:,}/s "
        f"by {mqtt['publishers']} processes)",
        # Fewer values than a second's worth at the target rate time the start-up only.
        at_load(
            mqtt["acked_per_s"] >= MQTT_VALUES_PER_S,
            mqtt["values_measured"] >= MQTT_VALUES_PER_S,
        ),
    )
    add(
        f"OPC UA >= {OPCUA_CHANGES_PER_S:,} data changes/s ({OPCUA_ITEMS:,} items), one core",
        f"{opcua['acked_per_s']:,}/s over {opcua['items']:,} items (written at "
        f"{opcua['offered_per_s']:,}/s)",
        at_load(
            opcua["acked_per_s"] >= OPCUA_CHANGES_PER_S,
            opcua["items"] == OPCUA_ITEMS and opcua["values_measured"] >= OPCUA_CHANGES_PER_S,
        ),
    )
    late = modbus["lateness"]
    issue_load = (
        modbus["registers"] == MODBUS_REGISTERS and modbus["interval_s"] == MODBUS_INTERVAL_S
    )
    add(
        f"Modbus {MODBUS_REGISTERS:,} registers at {MODBUS_INTERVAL_S:g} s: poll jitter p99 <= "
        f"{MODBUS_P99_MS} ms",
        f"p50 {late['p50_ms']} ms, p99 {late['p99_ms']} ms, max {late['max_ms']} ms over "
        f"{late['polls']} polls of {modbus['registers']:,} registers at {modbus['interval_s']:g} s"
        + (f"; irregular steps {late['irregular_steps_ms']}" if late["irregular_steps_ms"] else ""),
        at_load(late["p99_ms"] <= MODBUS_P99_MS and not late["irregular_steps_ms"], issue_load),
    )
    for key, figures in connectors.items():
        name = NAMES[key]
        add(
            f"{name}: every value offered at the edge acked by ingest",
            f"{figures['values_acked']:,} acked of {figures['values_offered']:,}"
            + (f"; lost {figures['lost']}" if figures["lost"] else ""),
            figures["values_acked"] == figures["values_offered"] and not figures["lost"],
        )
        add(
            f"{name}: gateway CPU per value (gateway on CPU {figures['gateway_cpus_allowed']})",
            f"{figures['gateway_cpu_us_per_value']} µs ({figures['gateway_cpu_share']} of a core; "
            f"its core busy {figures['gateway_core_busy_share']:.0%}, the machine's cores "
            f"{figures['machine_busy_share']:.0%})",
            None,
        )
    return out


def print_report(report: dict[str, Any]) -> None:
    """Print the run as a phase table and the targets table."""
    print(f"{machine_line(report)}; gateway pinned to CPU {report['options']['cpu']}")
    rows = [{"connector": NAMES[k], **v} for k, v in report["connectors"].items()]
    print()
    print(
        render(
            rows,
            [
                ("connector", "connector"),
                ("values_offered", "offered"),
                ("values_acked", "acked"),
                ("values_measured", "measured"),
                ("seconds", "s"),
                ("acked_per_s", "acked/s"),
                ("gateway_cpu_us_per_value", "gateway CPU µs/value"),
                ("gateway_cpu_share", "gateway cores"),
            ],
        )
    )
    print()
    print(
        render(
            report["targets"], [("target", "target"), ("value", "value"), ("verdict", "verdict")]
        )
    )
