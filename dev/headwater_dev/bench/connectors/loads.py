"""The load of each connector phase, from the edge to acknowledged by ingest.

Each phase drives one gateway process (:class:`PinnedGateway`) with one connector:

- MQTT: QoS 1 JSON messages (one value each) published to Mosquitto by publisher
  processes, 500 in flight each, after a warm-up that proves the subscription and ingest
  are up;
- OPC UA: rounds of writes to every monitored variable of asyncua's server (in its own
  process), paced to an offered rate, after the items' initial values (the
  subscription's first data changes);
- Modbus: the gateway polls pymodbus's server; each poll's start is when its first read
  reached the device.

A phase's clock runs from the first value offered at the edge to the health report in
which ingest has acknowledged (``delivered``) every one; the gateway's CPU is read from
/proc over the same span.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

from headwater_dev.bench.connectors.machine_busy import busy_share, cpu_ticks
from headwater_dev.bench.connectors.pinned_gateway import PinnedGateway, delivered, lost, spooled
from headwater_dev.bench.connectors.poll_lateness import poll_lateness
from headwater_dev.bench.connectors.sources import OpcUaServer, mqtt_publishers

MQTT_WARMUP = 200
#: Readiness (subscribed, first values acked) may take the ingest server's start-up.
READY_S = 120.0


def _figures(
    gateway: PinnedGateway, connector: str, offered: int, measured: int, seconds: float,
    cpu_s: float, ticks: dict[str, tuple[int, int]], final: dict[str, Any], per_message: int = 1,
) -> dict[str, Any]:  # fmt: skip
    """The figures every phase reports, from its last health report ``final``.

    ``measured`` values took ``seconds`` and ``cpu_s``; ``ticks`` are the CPUs' at the
    start; ``offered`` values in all (the warm-up included) went in at the edge.
    """
    now = cpu_ticks()
    return {
        "values_offered": offered,
        "values_spooled": spooled(final, connector),
        "values_acked": delivered(final) * per_message,
        "lost": lost(final),
        "values_measured": measured,
        "seconds": round(seconds, 2),
        "acked_per_s": round(measured / seconds),
        "gateway_cpu_us_per_value": round(cpu_s * 1e6 / measured, 1),
        "gateway_cpu_share": round(cpu_s / seconds, 2),
        # Who set the pace: the gateway's core busy all along, or the machine's cores.
        "gateway_core_busy_share": busy_share(ticks, now, f"cpu{gateway.cpu}"),
        "machine_busy_share": busy_share(ticks, now, "cpu"),
        "gateway_cpus_allowed": gateway.cpus_allowed(),
        # A reconnect in the phase shows here (and OPC UA marks the gap in the data).
        "connector_errors": final["connectors"][connector]["errors_total"],
    }


async def _when_acked(
    gateway: PinnedGateway,
    connector: str,
    total: int,
    measured: int,
    since: tuple[float, float, dict[str, tuple[int, int]]],
    within_s: float,
) -> dict[str, Any]:
    """Wait until ingest acknowledged ``total`` values; the phase's figures from ``since``.

    ``since``: the phase's start (``perf_counter``), the gateway's CPU seconds and the
    CPUs' ticks then.
    """
    final = await gateway.wait_for(
        lambda r: delivered(r) >= total, within_s, f"{total} {connector} values acked"
    )
    started, cpu, ticks = since
    seconds = time.perf_counter() - started
    return _figures(
        gateway, connector, total, measured, seconds, gateway.cpu_seconds() - cpu, ticks, final
    )


async def mqtt(
    gateway: PinnedGateway, port: int, values: int, publishers: int, within_s: float
) -> dict[str, Any]:
    """Publish ``values`` QoS 1 messages from ``publishers`` processes; report once acked."""
    await gateway.wait_for(
        lambda _: "subscribed on the edge broker" in gateway.log(), READY_S, "MQTT subscribed"
    )
    async with mqtt_publishers(port, MQTT_WARMUP, 1) as warmup:
        await warmup.go()
    await gateway.wait_for(lambda r: delivered(r) >= MQTT_WARMUP, READY_S, "warm-up acked")
    async with mqtt_publishers(port, values, publishers) as load:
        since = (time.perf_counter(), gateway.cpu_seconds(), cpu_ticks())
        published_s = await load.go()
    figures = await _when_acked(gateway, "mqtt", MQTT_WARMUP + values, values, since, within_s)
    figures["warmup_values"] = MQTT_WARMUP
    figures["publishers"] = publishers
    figures["offered_per_s"] = round(values / published_s)
    return figures


async def opcua(
    gateway: PinnedGateway, server: OpcUaServer, values: int, rate: float, within_s: float
) -> dict[str, Any]:
    """Have the server write ``values`` changes; the report once all are acked.

    Rounds of one change per variable, at most ``rate`` changes per second.
    """
    items = server.items
    await gateway.wait_for(
        lambda r: delivered(r) >= items, READY_S, f"the {items} items' initial values acked"
    )
    since = (time.perf_counter(), gateway.cpu_seconds(), cpu_ticks())
    written_s = await server.write(values, rate)
    figures = await _when_acked(gateway, "opcua", items + values, values, since, within_s)
    figures["initial_values"] = items
    figures["items"] = items
    figures["offered_per_s"] = round(values / written_s)
    return figures


async def modbus(
    gateway: PinnedGateway, poll_starts_ms: list[int], registers: int, polls: int,
    interval_s: float, within_s: float,
) -> dict[str, Any]:  # fmt: skip
    """Let the gateway poll ``polls`` times; lateness and the report once all are acked.

    ``poll_starts_ms`` fills as the device sees each poll's first read.
    """
    await gateway.wait_for(lambda r: delivered(r) >= 1, READY_S, "the first Modbus poll acked")
    first = len(poll_starts_ms)
    cpu = gateway.cpu_seconds()
    ticks = cpu_ticks()
    started = time.perf_counter()
    final = await gateway.wait_for(
        lambda r: len(poll_starts_ms) >= first + polls and delivered(r) >= first + polls,
        within_s,
        f"{polls} Modbus polls acked",
    )
    seconds = time.perf_counter() - started
    cpu_s = gateway.cpu_seconds() - cpu
    # Every poll spooled is acknowledged once the spool is empty (the health report
    # counts values and deliveries in one snapshot).
    final = await gateway.wait_for(
        lambda r: r["spool"]["depth"] == 0 and delivered(r) * registers == spooled(r, "modbus"),
        within_s,
        "the Modbus polls spooled all acked",
    )
    # A poller offers what it reads: every value spooled.
    read = spooled(final, "modbus")
    figures = _figures(
        gateway, "modbus", read, polls * registers, seconds, cpu_s, ticks, final, registers
    )
    timed = poll_starts_ms[first : first + polls]
    figures.update(
        registers=registers,
        interval_s=interval_s,
        # One start per poll whatever its blocks of reads: the polls spooled, and at most
        # one more in flight when the last report was taken.
        polls_seen_by_device=len(poll_starts_ms),
        polls_spooled=read // registers,
        lateness=asdict(poll_lateness(timed, round(interval_s * 1000))),
    )
    return figures
