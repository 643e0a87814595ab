"""Read typed settings from environment variables, with errors that name the variable."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar

from headwater.errors import HeadwaterError


class SettingError(HeadwaterError, ValueError):
    """An environment variable holds a value that cannot be used."""


#: A duration with an optional unit (none: seconds), as some earlier setting names took it.
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_duration(raw: str, label: str) -> float:
    """Return ``raw`` ("250ms", "5s", "10m", "1h", "2d", or plain seconds) in seconds."""
    match = _DURATION.match(raw)
    if not match:
        raise SettingError(f"{label}={raw!r} is not a duration (for example 500ms, 5s, 10m, 1h)")
    return float(match.group(1)) * _UNIT_SECONDS[match.group(2)]


#: While :func:`recording` runs: every variable read, with its default, in reading order.
_READS: ContextVar[dict[str, str] | None] = ContextVar("headwater_setting_reads", default=None)


@contextmanager
def recording() -> Iterator[dict[str, str]]:
    """Collect ``{variable: default}`` of every setting read inside the block.

    ``--help`` lists a service's variables by running its ``from_env`` under this, so the
    list is the code's own and cannot drift from it.
    """
    reads: dict[str, str] = {}
    token = _READS.set(reads)
    try:
        yield reads
    finally:
        _READS.reset(token)


def read_variable(env: Mapping[str, str], name: str, shown_default: str) -> str:
    """Return ``env[name]`` stripped ("" when unset), noting it for :func:`recording`."""
    reads = _READS.get()
    if reads is not None:
        reads.setdefault(name, shown_default)
    return env.get(name, "").strip()


def env_str(env: Mapping[str, str], name: str, default: str) -> str:
    """Return ``env[name]`` stripped, or ``default`` when unset or empty."""
    return read_variable(env, name, default) or default


def env_int(env: Mapping[str, str], name: str, default: int, minimum: int = 0) -> int:
    """Return ``env[name]`` as an int of at least ``minimum``."""
    raw = env_str(env, name, str(default))
    try:
        value = int(raw)
    except ValueError:
        raise SettingError(f"{name}={raw!r} is not an integer") from None
    if value < minimum:
        raise SettingError(f"{name}={value} must be at least {minimum}")
    return value


def env_float(env: Mapping[str, str], name: str, default: float, minimum: float = 0.0) -> float:
    """Return ``env[name]`` as a float of at least ``minimum``."""
    raw = env_str(env, name, str(default))
    try:
        value = float(raw)
    except ValueError:
        raise SettingError(f"{name}={raw!r} is not a number") from None
    if value < minimum:
        raise SettingError(f"{name}={value} must be at least {minimum}")
    return value


def env_bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    """Return ``env[name]`` as a bool (true/false, 1/0, yes/no)."""
    raw = env_str(env, name, "true" if default else "false").lower()
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise SettingError(f"{name}={raw!r} is not a boolean (use true or false)")
