"""Settings of the enricher, read once from ``HEADWATER_ENRICHER_*`` variables.

Every setting is in the table in ``docs/enricher.md``. Command-line flags override the
environment (``cli.py`` applies them with :func:`dataclasses.replace`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from headwater.enricher.hop.budget import Budget
from headwater.enricher.topics import EnricherTopics
from headwater.kafka.settings import KafkaSettings
from headwater.runtime.env import SettingError, env_int, env_str

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}

#: The consumer group the enricher commits its progress to, for monitoring only
#: (``progress_offsets.py``); ``headwater lag`` and ``headwater status`` read it by default.
DEFAULT_PROGRESS_GROUP = "headwater-enricher"


def parse_duration(name: str, raw: str) -> float:
    """Return ``raw`` ("250ms", "5s", "10m", "1h", "2d", or plain seconds) in seconds."""
    match = _DURATION.match(raw)
    if not match:
        raise SettingError(f"{name}={raw!r} is not a duration (for example 500ms, 5s, 10m, 1h)")
    return float(match.group(1)) * _UNIT_S[match.group(2)]


def _progress_group(raw: str) -> str:
    """``HEADWATER_ENRICHER_PROGRESS_GROUP``: unset means the default, ``off`` means none."""
    if not raw:
        return DEFAULT_PROGRESS_GROUP
    return "" if raw.lower() == "off" else raw


#: A JVM heap size as Spark reads it (``2g``, ``1536m``).
_JVM_MEMORY = re.compile(r"[1-9][0-9]*[kKmMgGtT]?")


@dataclass(frozen=True)
class EnricherSettings:
    """Everything the enricher can be configured with (see docs/enricher.md)."""

    checkpoint_location: str = ".headwater/enricher/checkpoint"
    #: "earliest" or "latest"; required when the checkpoint does not exist yet.
    starting_offsets: str = ""
    max_records_per_trigger: int = 20_000
    trigger_interval_seconds: float = 1.0
    max_attempts: int = 5
    retry_backoff_seconds: float = 5.0
    retry_backoff_max_seconds: float = 300.0
    dedup_window_seconds: float = 3600.0
    #: How long message ids are remembered at all: the gateways' 7-day retention plus an
    #: hour (the JVM operator's Dedup). Not longer than the window: ids are kept for the
    #: window only.
    dedup_horizon_seconds: float = 7 * 86400.0 + 3600.0
    #: The most quantities kept per device in the snapshot (state.devices.v1 latest_values).
    max_latest_values: int = 100
    #: The most bytes one device keeps parked waiting for master data (the JVM operator's
    #: ``max_parked_bytes``); a message past it is a dead letter (PARKED_BYTES_LIMIT).
    max_parked_bytes: int = 32 << 20
    #: The heap of the driver, which runs the keyed state when Spark runs locally; a cluster
    #: sets it with spark-submit (the chart's ``enricher.driver.memory``).
    driver_memory: str = "2g"
    spark_master: str = ""
    shuffle_partitions: int = 4
    metrics_port: int = 0
    #: Consumer group the end offsets of each batch are committed to, for monitoring only
    #: (restarts use the checkpoint); empty (``off`` in the environment): commit nothing.
    progress_group: str = DEFAULT_PROGRESS_GROUP
    #: What one message may cost the normalize step (budget.py; read again by each worker).
    normalize_budget: Budget = field(default_factory=Budget)
    topics: EnricherTopics = field(default_factory=EnricherTopics)
    kafka: KafkaSettings = field(default_factory=KafkaSettings)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> EnricherSettings:
        """Read the settings from the environment; raise SettingError on a bad value."""
        env = os.environ if env is None else env
        p = "HEADWATER_ENRICHER_"

        def dur(name: str, default: float) -> float:
            return parse_duration(p + name, env_str(env, p + name, str(default)))

        settings = cls(
            checkpoint_location=env_str(env, p + "CHECKPOINT_LOCATION", cls.checkpoint_location),
            starting_offsets=env_str(env, p + "STARTING_OFFSETS", "").lower(),
            max_records_per_trigger=env_int(
                env, p + "MAX_RECORDS_PER_TRIGGER", cls.max_records_per_trigger, 1
            ),
            trigger_interval_seconds=dur("TRIGGER_INTERVAL", cls.trigger_interval_seconds),
            max_attempts=env_int(env, p + "MAX_ATTEMPTS", cls.max_attempts, 1),
            retry_backoff_seconds=dur("RETRY_BACKOFF", cls.retry_backoff_seconds),
            retry_backoff_max_seconds=dur("RETRY_BACKOFF_MAX", cls.retry_backoff_max_seconds),
            dedup_window_seconds=dur("DEDUP_WINDOW", cls.dedup_window_seconds),
            dedup_horizon_seconds=dur("DEDUP_HORIZON", cls.dedup_horizon_seconds),
            max_latest_values=env_int(env, p + "MAX_LATEST_VALUES", cls.max_latest_values, 1),
            max_parked_bytes=env_int(env, p + "MAX_PARKED_BYTES", cls.max_parked_bytes, 1),
            driver_memory=env_str(env, p + "DRIVER_MEMORY", cls.driver_memory),
            spark_master=env_str(env, p + "SPARK_MASTER", ""),
            shuffle_partitions=env_int(env, p + "SHUFFLE_PARTITIONS", cls.shuffle_partitions, 1),
            metrics_port=env_int(env, p + "METRICS_PORT", 0),
            progress_group=_progress_group(env_str(env, p + "PROGRESS_GROUP", "")),
            normalize_budget=Budget.from_env(env),
            topics=EnricherTopics.with_prefix(env_str(env, p + "TOPIC_PREFIX", "")),
            kafka=KafkaSettings.from_env(env),
        )
        settings.check()
        return settings

    def check(self) -> None:
        """Raise SettingError when settings contradict each other."""
        if self.starting_offsets not in ("", "earliest", "latest"):
            raise SettingError(
                f"HEADWATER_ENRICHER_STARTING_OFFSETS={self.starting_offsets!r}: use earliest "
                "or latest"
            )
        if self.dedup_window_seconds < 1:
            raise SettingError("HEADWATER_ENRICHER_DEDUP_WINDOW must be at least 1s")
        if not _JVM_MEMORY.fullmatch(self.driver_memory):
            raise SettingError(
                f"HEADWATER_ENRICHER_DRIVER_MEMORY={self.driver_memory!r}: use a JVM size such "
                "as 2g or 1536m"
            )
