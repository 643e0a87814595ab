"""The health report of a ``headwater gateway run`` process, read from ``GET /health``."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any


def read_health(port: int) -> dict[str, Any] | None:
    """The report on ``127.0.0.1:port``, or None while the gateway does not answer."""
    url = f"http://127.0.0.1:{port}/health"
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return dict(json.load(answer))
    except urllib.error.HTTPError as unhealthy:  # 503: a connector not connected (yet)
        return dict(json.load(unhealthy))
    except OSError:
        return None
