"""Waiting for a condition, never for a fixed time: the bound is generous and only fails a hang."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


async def until(condition: Callable[[], object], within_s: float, what: str) -> None:
    """Return once ``condition()`` is true; fail naming ``what`` after ``within_s`` seconds."""
    deadline = time.monotonic() + within_s
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {within_s}s"
        await asyncio.sleep(0.1)
