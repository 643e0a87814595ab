"""``headwater bench gateway-soak``: the gateway process's RSS under a steady load, over time.

One ``headwater gateway run`` process (pinned to one CPU, as in the connectors benchmark)
with all three connectors at once, each against a real source on loopback: Mosquitto fed
QoS 1 JSON messages at a steady rate by a publisher in this process, asyncua's server in
a process of its own writing data changes at a steady rate, pymodbus's server polled.
Ingest runs in its own process on the embedded broker (or ``--bootstrap``), as in the other
benchmarks. The gateway's RSS (``VmRSS``) is sampled every ``sample_every_s``; after the
warm-up every sample is compared with the first one after it. The run stops by itself
after ``seconds`` (every source stopped, then every value offered awaited at ingest).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

from headwater_dev.bench import server_proc
from headwater_dev.bench.cli import render
from headwater_dev.bench.connectors.loads import READY_S
from headwater_dev.bench.connectors.options import SoakOptions
from headwater_dev.bench.connectors.pinned_gateway import (
    PinnedGateway,
    delivered,
    last_cpu,
    lost,
    spooled,
)
from headwater_dev.bench.connectors.sources import IN_FLIGHT, WORK_S, opcua_server, quiet
from headwater_dev.bench.report import machine, machine_line
from headwater_dev.devstack.ports import free_port
from headwater_dev.edge.modbus_device import ModbusDevice
from headwater_dev.edge.mosquitto import Mosquitto
from headwater_dev.edge.opcua_server import NS

#: The issue's bound: RSS flat within this many MB either side over the soak.
RSS_BOUND_MB = 10.0
#: The issue's soak: 30 minutes at the MQTT target rate.
ISSUE_SECONDS, ISSUE_MQTT_RATE = 1800.0, 10_000.0
#: The publisher sends a batch this often (the rate's share each time).
PUBLISH_PERIOD_S = 0.1


def _connectors(
    mosquitto_port: int, opcua_url: str, modbus_port: int, opts: SoakOptions
) -> list[dict[str, Any]]:
    return [
        {
            "name": "mqtt",
            "type": "mqtt",
            "broker": {"host": "127.0.0.1", "port": mosquitto_port, "client_id": "soak-gateway"},
            "topics": [
                {"filter": "soak/+", "device_id": "soak-{1}", "content_type": "application/json"}
            ],
        },
        {
            "name": "opcua",
            "type": "opcua",
            "url": opcua_url,
            "device_id": "soak-press",
            "publishing_interval_ms": 100,
            "items": [
                {"node_id": f"ns={NS};s=V{i}", "queue_size": 100} for i in range(opts.opcua_items)
            ],
        },
        {
            "name": "modbus",
            "type": "modbus",
            "host": "127.0.0.1",
            "port": modbus_port,
            "device_id": "soak-meter",
            "poll_interval_s": opts.modbus_interval_s,
            "registers": [
                {"name": f"r{i}", "table": "holding", "address": i, "type": "int16"}
                for i in range(opts.modbus_registers)
            ],
        },
    ]


async def _publish_steadily(port: int, rate: float, until: float) -> int:
    """Publish QoS 1 JSON messages at ``rate`` a second until ``until`` (monotonic); the count."""
    import aiomqtt

    payload = json.dumps({"temp_c": 21.5, "pad": "x" * 64}).encode()
    batch = max(1, round(rate * PUBLISH_PERIOD_S))
    published = 0
    client = aiomqtt.Client(
        "127.0.0.1", port, max_inflight_messages=IN_FLIGHT, logger=quiet("bench.soak.publisher")
    )
    async with client:
        due = time.monotonic()
        while time.monotonic() < until:
            await asyncio.gather(*(
                client.publish(f"soak/{(published + k) % 100:03d}", payload, qos=1)
                for k in range(batch)
            ))  # fmt: skip
            published += batch
            due += PUBLISH_PERIOD_S
            await asyncio.sleep(max(0.0, due - time.monotonic()))
    return published


@contextlib.asynccontextmanager
async def _sources(workdir: Path, opts: SoakOptions) -> AsyncIterator[tuple[int, Any, int]]:
    """Mosquitto, the OPC UA server and the Modbus device: (mosquitto port, server, modbus port)."""
    mosquitto = Mosquitto(workdir / "mosquitto", free_port(), max_queued=0, max_inflight=1000)
    mosquitto.start()
    device = ModbusDevice(free_port())
    await device.start()
    try:
        async with opcua_server(free_port(), opts.opcua_items) as server:
            yield mosquitto.port, server, device.port
    finally:
        await device.stop()
        mosquitto.stop()


def rss_figures(samples: list[tuple[float, float]], warmup_s: float) -> dict[str, Any]:
    """The RSS samples (seconds, MB) judged: each one after the warm-up against the first one.

    ``baseline_mb`` is the first sample at or after ``warmup_s``; ``max_deviation_mb`` the
    largest distance of a later sample from it, ``growth_mb`` the last sample's.
    """
    after = [mb for t, mb in samples if t >= warmup_s]
    if not after:
        raise ValueError(f"no RSS sample after the {warmup_s:g} s warm-up")
    baseline = after[0]
    return {
        "samples": len(samples),
        "start_mb": samples[0][1],
        "baseline_mb": baseline,
        "min_mb": min(after),
        "max_mb": max(after),
        "end_mb": after[-1],
        "max_deviation_mb": round(max(abs(mb - baseline) for mb in after), 1),
        "growth_mb": round(after[-1] - baseline, 1),
    }


async def _sample_rss(
    gateway: PinnedGateway, every_s: float, until: float, started: float
) -> list[tuple[float, float]]:
    samples: list[tuple[float, float]] = []
    while True:
        now = time.monotonic()
        samples.append((round(now - started, 1), server_proc.status_mb(gateway.pid, "VmRSS")))
        if now >= until:
            return samples
        await asyncio.sleep(min(every_s, max(0.0, until - now)))


def _messages_spooled(report: dict[str, Any], opts: SoakOptions) -> int:
    """Messages the connectors spooled: one per MQTT or OPC UA value, one per Modbus poll."""
    polls = spooled(report, "modbus") // opts.modbus_registers
    return spooled(report, "mqtt") + spooled(report, "opcua") + polls


async def _soak(
    gateway: PinnedGateway, mqtt_port: int, opcua: Any, opts: SoakOptions
) -> dict[str, Any]:
    await gateway.wait_for(
        lambda _: "subscribed on the edge broker" in gateway.log(), READY_S, "MQTT subscribed"
    )
    await gateway.wait_for(
        lambda r: spooled(r, "opcua") >= opts.opcua_items and spooled(r, "modbus") > 0,
        READY_S,
        "the OPC UA items' initial values and a Modbus poll spooled",
    )
    started = time.monotonic()
    until = started + opts.seconds
    cpu = gateway.cpu_seconds()
    writes = round(opts.opcua_rate * opts.seconds)
    published, written_s, samples = await asyncio.gather(
        _publish_steadily(mqtt_port, opts.mqtt_rate, until),
        # Paced over the whole soak: bounded by it, not by a phase's WORK_S.
        opcua.write(writes, opts.opcua_rate, opts.seconds + WORK_S),
        _sample_rss(gateway, opts.sample_every_s, until, started),
    )
    seconds = time.monotonic() - started
    cpu_s = gateway.cpu_seconds() - cpu
    # Every message spooled acknowledged by ingest (Modbus: one per poll).
    final = await gateway.wait_for(
        lambda r: r["spool"]["depth"] == 0 and delivered(r) >= _messages_spooled(r, opts),
        opts.drain_timeout_s,
        "every value spooled acked by ingest",
    )
    connectors = final["connectors"]
    return {
        "seconds": round(seconds, 1),
        "mqtt_published": published,
        "mqtt_spooled": spooled(final, "mqtt"),
        "opcua_written": writes,
        "opcua_written_s": round(written_s, 1),
        "opcua_spooled": spooled(final, "opcua"),
        "modbus_spooled": spooled(final, "modbus"),
        "messages_acked": delivered(final),
        "lost": lost(final),
        "connector_errors": {name: c["errors_total"] for name, c in connectors.items()},
        "gateway_cpu_share": round(cpu_s / seconds, 2),
        "gateway_cpus_allowed": gateway.cpus_allowed(),
        "rss": rss_figures(samples, opts.warmup_s),
        "rss_samples": samples,
    }


async def run_soak(opts: SoakOptions, bootstrap: str | None) -> dict[str, Any]:
    """One soak; the report (the RSS figures and the verdicts in ``targets``)."""
    cpu = last_cpu() if opts.cpu is None else opts.cpu
    report: dict[str, Any] = {"machine_at_start": machine(), "options": asdict(opts)}
    report["options"]["cpu"] = cpu
    with server_proc.serving(bootstrap) as (target, broker), tempfile.TemporaryDirectory() as tmp:
        report["broker"] = broker
        workdir = Path(tmp)
        async with _sources(workdir, opts) as (mqtt_port, opcua, modbus_port):
            connectors = _connectors(mqtt_port, opcua.url, modbus_port, opts)
            gateway = PinnedGateway(workdir / "gateway", target, connectors, cpu)
            gateway.start()
            try:
                report["soak"] = await _soak(gateway, mqtt_port, opcua, opts)
            finally:
                await asyncio.to_thread(gateway.stop)
    report["targets"] = targets(report["soak"], opts)
    report["machine_at_end"] = machine()
    return report


def targets(soak: dict[str, Any], opts: SoakOptions) -> list[dict[str, Any]]:
    """The soak's verdicts: {target, value, verdict} (met, MISSED or info)."""
    rss = soak["rss"]
    flat = rss["max_deviation_mb"] <= RSS_BOUND_MB
    window = f"{soak['seconds'] / 60:.1f} min after a {opts.warmup_s:g} s warm-up"
    at_issue_load = opts.seconds >= ISSUE_SECONDS and opts.mqtt_rate >= ISSUE_MQTT_RATE
    rss_value = (
        f"baseline {rss['baseline_mb']} MB, {rss['min_mb']}-{rss['max_mb']} MB, end "
        f"{rss['end_mb']} MB: at most {rss['max_deviation_mb']} MB from the baseline"
    )
    offered = soak["mqtt_published"] + soak["opcua_written"]
    return [
        {
            "target": f"RSS within ±{RSS_BOUND_MB:g} MB at this load ({window})",
            "value": rss_value,
            "verdict": "met" if flat else "MISSED",
        },
        {
            "target": f"issue 39: RSS flat (±{RSS_BOUND_MB:g} MB) over {ISSUE_SECONDS / 60:.0f} "
            f"min at {ISSUE_MQTT_RATE:,.0f} MQTT values/s",
            "value": f"{opts.mqtt_rate:,.0f} MQTT + {opts.opcua_rate:,.0f} OPC UA values/s, "
            f"{opts.modbus_registers} registers every {opts.modbus_interval_s:g} s, "
            f"{soak['seconds'] / 60:.1f} min",
            "verdict": ("met" if flat else "MISSED") if at_issue_load else "info",
        },
        {
            "target": "every value offered at the edge spooled and acked by ingest",
            "value": f"MQTT {soak['mqtt_spooled']:,} of {soak['mqtt_published']:,}, OPC UA "
            f"{soak['opcua_spooled']:,} of {soak['opcua_written']:,} (+ initial values); "
            f"{soak['messages_acked']:,} messages acked"
            + (f"; lost {soak['lost']}" if soak["lost"] else ""),
            "verdict": "met"
            if soak["mqtt_spooled"] == soak["mqtt_published"]
            and soak["opcua_spooled"] == opts.opcua_items + soak["opcua_written"]
            and not soak["lost"]
            else "MISSED",
        },
        {
            "target": f"gateway CPU (on CPU {soak['gateway_cpus_allowed']})",
            "value": f"{soak['gateway_cpu_share']} of a core over {offered:,} values",
            "verdict": "info",
        },
    ]


def print_report(report: dict[str, Any]) -> None:
    """Print the machine line, RSS once a minute (or every sample, if fewer), and the verdicts."""
    print(f"{machine_line(report)}; gateway pinned to CPU {report['options']['cpu']}")
    samples = report["soak"]["rss_samples"]
    every = max(1, round(60 / report["options"]["sample_every_s"]))
    shown = samples[::every] + ([samples[-1]] if (len(samples) - 1) % every else [])
    print()
    print(render([{"s": t, "mb": mb} for t, mb in shown], [("s", "s"), ("mb", "gateway RSS MB")]))
    print()
    print(
        render(
            report["targets"], [("target", "target"), ("value", "value"), ("verdict", "verdict")]
        )
    )
