"""Run the service's main coroutine on the configured event loop.

grpc.aio runs on any asyncio event loop. uvloop (libuv under asyncio's API) makes each of
the loop's own steps cheaper; with one message per call the loop takes several steps per
call, so it is the default (``HEADWATER_INGEST_EVENT_LOOP``, docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T], event_loop: str) -> T:
    """Run ``main`` to completion on a new loop of kind ``event_loop`` ("uvloop"/"asyncio")."""
    if event_loop == "uvloop":
        import uvloop

        return uvloop.run(main)
    return asyncio.run(main)
