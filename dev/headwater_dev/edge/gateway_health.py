"""The health report of a ``headwater gateway run`` process, read from ``GET /health``."""

from __future__ import annotations

from typing import Any

from headwater.gateway.app.health import probe


def read_health(port: int) -> dict[str, Any] | None:
    """The report on ``127.0.0.1:port`` (healthy or not); None while nothing answers."""
    answer = probe(f"127.0.0.1:{port}")
    return None if answer is None else answer[1]
