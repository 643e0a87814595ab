"""Structured JSON logs that carry the OpenTelemetry trace id.

Every log line is one JSON object with ``time``, ``level``, ``logger``, ``message``, the
current ``trace_id``/``span_id`` when a span is active, and any ``extra={...}`` fields.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar

from opentelemetry import trace

from headwater.runtime.settings import Settings, setting

_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """Format a record as one JSON object per line."""

    def format(self, record: logging.LogRecord) -> str:
        """Render ``record`` as JSON, adding trace context and extra fields."""
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        ctx = trace.get_current_span().get_span_context()
        if ctx.is_valid:
            entry["trace_id"] = format(ctx.trace_id, "032x")
            entry["span_id"] = format(ctx.span_id, "016x")
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


@dataclass(frozen=True)
class LogSettings(Settings):
    """How much every Headwater process logs."""

    env_prefix: ClassVar[str] = "HEADWATER_"

    log_level: str = setting(
        "INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"), help="JSON log level"
    )


def log_level(env: Mapping[str, str] | None = None) -> str:
    """Return ``HEADWATER_LOG_LEVEL`` (upper case), INFO when unset; SettingError if unknown."""
    return LogSettings.from_env(env).log_level


def configure_logging(level: str | None = None) -> None:
    """Send JSON logs to stderr at ``level`` (default: ``HEADWATER_LOG_LEVEL`` or INFO)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper() if level else log_level())
    # aiokafka logs every reconnect attempt at ERROR; our own messages say what to do.
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    # py4j logs every command between PySpark and its JVM at INFO.
    logging.getLogger("py4j").setLevel(logging.WARNING)
