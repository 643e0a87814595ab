"""The gateway's health: per connector (connected, values, errors, gaps) and the spool's.

Served as JSON on ``GET /health`` when ``health.listen`` is set (200 when every connector
is connected, 503 otherwise, so a supervisor can probe it: :func:`probe`, ``headwater
gateway health``) and logged every ``health.log_every_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

from headwater.gateway.connectors.base import Connector
from headwater.gateway.spool import Spool

log = logging.getLogger(__name__)


def report(connectors: Sequence[Connector], spool: Spool) -> dict[str, Any]:
    """Return the health report: ``ok`` when every connector is connected."""
    stats = spool.stats() if not spool.closed else None
    return {
        "ok": all(c.health.connected for c in connectors),
        "connectors": {c.name: c.health.report() for c in connectors},
        "spool": None
        if stats is None
        else {
            "depth": stats.depth,
            "bytes": stats.bytes,
            "max_bytes": spool.limits.max_bytes,
            "oldest_age_s": round(stats.oldest_age_s, 3),
            "counters": dict(stats.counters),
        },
    }


async def serve(
    listen: str, connectors: Sequence[Connector], spool: Spool, stop: asyncio.Event
) -> None:
    """Answer ``GET /health`` on ``listen`` (host:port) until ``stop`` is set."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            request = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            path = request.split(b" ", 2)[1] if request.count(b" ") >= 2 else b""
            if path == b"/health":
                doc = report(connectors, spool)
                status = "200 OK" if doc["ok"] else "503 Service Unavailable"
                body = json.dumps(doc).encode()
            else:
                status, body = "404 Not Found", b'{"error": "GET /health"}'
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                + body
            )
            await writer.drain()
        writer.close()

    host, port = listen.rsplit(":", 1)
    server = await asyncio.start_server(answer, host, int(port))
    log.info("health listening", extra={"listen": listen})
    async with server:
        await stop.wait()


async def log_every(
    every_s: float, connectors: Sequence[Connector], spool: Spool, stop: asyncio.Event
) -> None:
    """Log the health report every ``every_s`` seconds until ``stop`` is set."""
    while True:
        try:
            await asyncio.wait_for(stop.wait(), every_s)
            return
        except TimeoutError:
            log.info("health", extra={"health": report(connectors, spool)})


def probe(listen: str, timeout_s: float = 5.0) -> tuple[bool, dict[str, Any]] | None:
    """Ask the gateway serving ``listen`` (``host:port``) for its report: (ok, report).

    ``ok`` is the HTTP answer (200, not 503); ``0.0.0.0`` is asked on loopback. None when
    nothing answers there, or not with a report.
    """
    host, port = listen.rsplit(":", 1)
    url = f"http://{'127.0.0.1' if host == '0.0.0.0' else host}:{port}/health"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as answer:
            ok, body = True, answer.read()
    except urllib.error.HTTPError as unhealthy:  # 503: a connector not connected (yet)
        ok, body = False, unhealthy.read()
    except OSError:  # refused, timed out
        return None
    try:
        return ok, dict(json.loads(body))
    except ValueError:
        return None
