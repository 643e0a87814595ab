"""Deprecated import path, kept for one release: use :mod:`headwater.runtime.telemetry`."""

from headwater.runtime.telemetry import *  # noqa: F403
from headwater.runtime.telemetry import Telemetry, TelemetryConfigError, create_telemetry

__all__ = ["Telemetry", "TelemetryConfigError", "create_telemetry"]
