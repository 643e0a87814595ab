"""Overload as a gateway sees it: gateway-library clients offered 2x and 10x capacity.

Part of ``headwater bench ingest --overload-seconds N``. Load-generator processes each run
a few ``GatewayClient``s, every one with its own spool on disk, one stream per endpoint,
exactly as a site would. Each process spools readings at its share of ``factor`` x the
capacity measured in the same run for N seconds, the clients sending all the while, then
waits for the spools to drain. Reported per window: messages lost (spooled, then neither
acknowledged, rejected, nor still spooled: must be 0), rejected for good (must be 0: an
overload refusal is never final), goodput during the load against capacity, the time the
spools took to drain after it, and the refusal codes the clients saw (information).

The offered rate is what the processes managed to spool: on a small machine they cannot
spool 10x a replica's capacity; the report says how much they did.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import tempfile
import time
from collections import Counter
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from headwater.gateway import DeliveryReport, GatewayClient, GatewayConfig, NewMessage, Spool

#: Load-generator processes (each its own GIL) and gateways in each.
WORKERS = 2
GATEWAYS_PER_WORKER = 4
#: How often a gateway spools its share of the offered rate.
SPOOL_EVERY_S = 0.1
#: Longest wait for the spools to drain after the load stops.
DRAIN_WITHIN_S = 300.0
CT = "application/vnd.acme.telemetry.v1+json"


def run_window(target: str, msgs_per_s: float, seconds: float, payload: int) -> dict[str, Any]:
    """Offer ``msgs_per_s`` through gateway clients for ``seconds``; return the figures."""
    ctx = multiprocessing.get_context("spawn")
    pipes, procs = [], []
    with tempfile.TemporaryDirectory(prefix="hw-overload-") as tmp:
        for w in range(WORKERS):
            parent, child = ctx.Pipe()
            proc = ctx.Process(
                target=_worker,
                args=(target, msgs_per_s / WORKERS, seconds, payload, f"{tmp}/w{w}", child),
                daemon=True,
            )
            proc.start()
            pipes.append(parent)
            procs.append(proc)
        outs = [p.recv() for p in pipes]
        for proc in procs:
            proc.join(30)
    codes: Counter[str] = Counter()
    for out in outs:
        codes.update(out["codes"])
    spooled = sum(o["spooled"] for o in outs)
    acked = sum(o["acked"] for o in outs)
    rejected = sum(o["rejected"] for o in outs)
    left = sum(o["left"] for o in outs)
    return {
        "offered_msgs_per_s": round(msgs_per_s),
        "spooled_msgs_per_s": round(spooled / seconds),
        "spooled": spooled,
        "acked": acked,
        "rejected_for_good": rejected,
        "still_spooled": left,
        "lost": spooled - acked - rejected - left,
        "goodput_msgs_per_s": round(sum(o["acked_in_window"] for o in outs) / seconds),
        "drain_s": max(o["drain_s"] for o in outs),
        "drained": all(o["left"] == 0 for o in outs),
        "refusal_codes": dict(codes),
    }


def _worker(
    target: str, msgs_per_s: float, seconds: float, payload: int, folder: str, conn: Connection
) -> None:
    Path(folder).mkdir(parents=True)
    conn.send(asyncio.run(_gateways(target, msgs_per_s, seconds, payload, Path(folder))))


async def _gateways(
    target: str, msgs_per_s: float, seconds: float, payload: int, folder: Path
) -> dict[str, Any]:
    codes: Counter[str] = Counter()
    acked = rejected = acked_in_window = 0
    in_window = True

    def report(r: DeliveryReport) -> None:
        nonlocal acked, rejected, acked_in_window
        if r.status == "delivered":
            acked += 1
            acked_in_window += in_window
        elif r.status == "rejected":
            rejected += 1
        if r.code != "OK":
            codes[r.code] += 1

    spools = [Spool(folder / f"gw{i}.db") for i in range(GATEWAYS_PER_WORKER)]
    config = GatewayConfig(target=target, backoff_initial_s=0.05, backoff_max_s=1.0)
    clients = [GatewayClient(s, config, report) for s in spools]
    stop = asyncio.Event()
    runners = [asyncio.create_task(c.run(stop)) for c in clients]
    per_step = msgs_per_s * SPOOL_EVERY_S / len(clients)
    readings = [NewMessage(f"acme-ovl-{i:03d}", CT, b"x" * payload) for i in range(1000)]
    spooled, owed = 0, 0.0
    started = time.monotonic()
    step = 0
    while time.monotonic() - started < seconds:
        owed += per_step
        n = int(owed)
        owed -= n
        for client in clients:
            # Devices take turns, as readings of a site's devices would.
            batch = [readings[(spooled + k) % len(readings)] for k in range(n)]
            await client.enqueue_many("telemetry", batch)
            spooled += n
        step += 1
        await asyncio.sleep(max(0.0, started + step * SPOOL_EVERY_S - time.monotonic()))
    in_window = False
    load_end = time.monotonic()
    while time.monotonic() - load_end < DRAIN_WITHIN_S:
        if not any(s.depth for s in spools):
            break
        await asyncio.sleep(0.1)  # the spools' depth, read from memory: no event to wait on
    drain_s = round(time.monotonic() - load_end, 1)
    stop.set()
    await asyncio.gather(*runners, return_exceptions=True)
    left = sum(s.depth for s in spools)
    for client, spool in zip(clients, spools, strict=True):
        await client.close()
        spool.close()
    return {
        "spooled": spooled,
        "acked": acked,
        "rejected": rejected,
        "left": left,
        "acked_in_window": acked_in_window,
        "drain_s": drain_s,
        "codes": dict(codes),
    }
