"""Settings of the enricher, declared once: read from ``HEADWATER_ENRICHER_*``, flags, docs.

The table in ``docs/enricher.md`` is generated from these declarations (``make docs``), and
``headwater enricher run`` takes its flags from them. The Kafka connection and the topic
prefix are the shared declarations of :mod:`headwater.kafka.options`, the checkpoint and the
progress group those of :mod:`headwater.ops.enricher_position`; the normalize budget is
:class:`~headwater.enricher.hop.budget.Budget`, which the Python workers read themselves.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

from headwater.enricher.hop.budget import Budget
from headwater.enricher.topics import EnricherTopics
from headwater.kafka.options import TopicPrefix
from headwater.kafka.settings import KafkaSettings
from headwater.ops.enricher_position import EnricherPosition
from headwater.runtime.env import SettingError
from headwater.runtime.settings import Renamed, setting

_P = "HEADWATER_ENRICHER_"

#: A JVM heap size as Spark reads it (``2g``, ``1536m``).
_JVM_MEMORY = re.compile(r"[1-9][0-9]*[kKmMgGtT]?")


def _with_unit(name: str, flag: bool = False) -> tuple[Renamed, ...]:
    """The earlier name of a seconds setting, which took a unit ("500ms", "1h"): one release."""
    old_flag = "--" + name.lower().replace("_", "-") if flag else ""
    return (Renamed(_P + name, with_unit=True, flag=old_flag),)


@dataclass(frozen=True)
class EnricherSettings(EnricherPosition):
    """Everything the enricher can be configured with (the table in docs/enricher.md).

    Its checkpoint and progress group are declared by :class:`EnricherPosition`, which the
    operator commands read without Spark.
    """

    env_prefix: ClassVar[str] = _P

    starting_offsets: str = setting(
        "",
        choices=("earliest", "latest"),
        flag=True,
        help="where a query without a checkpoint starts. **Required when the checkpoint does "
        "not exist yet**; ignored once it does. Never guessed",
    )
    max_records_per_trigger: int = setting(
        20_000,
        minimum=1,
        flag=True,
        help="admission control: records per micro-batch, shared fairly across partitions",
    )
    trigger_interval_seconds: float = setting(
        1.0,
        minimum=0,
        unit="s",
        flag=True,
        help="micro-batch interval",
        renamed=_with_unit("TRIGGER_INTERVAL", flag=True),
    )
    max_attempts: int = setting(
        5,
        minimum=1,
        flag=True,
        help="attempts for a message without master data before it is dead-lettered",
    )
    retry_backoff_seconds: float = setting(
        5.0,
        minimum=0,
        unit="s",
        help="first retry delay; doubles per attempt",
        renamed=_with_unit("RETRY_BACKOFF"),
    )
    retry_backoff_max_seconds: float = setting(
        300.0,
        minimum=0,
        unit="s",
        help="cap of the retry delay",
        renamed=_with_unit("RETRY_BACKOFF_MAX"),
    )
    dedup_window_seconds: float = setting(
        3600.0,
        minimum=1,
        unit="s",
        flag=True,
        help="the recent tier of the dedup: ids first seen within it are checked with no extra "
        "state call (20 bytes per id, in the device's one state value)",
        renamed=_with_unit("DEDUP_WINDOW", flag=True),
    )
    #: The gateways' 7-day retention plus an hour (the JVM operator's Dedup). Not longer than
    #: the window: ids are kept for the window only.
    dedup_horizon_seconds: float = setting(
        7 * 86400.0 + 3600.0,
        minimum=0,
        unit="s",
        help="how long a repeated `message_id` of the same tenant and device is still a "
        "DUPLICATE (7 days + 1 h: the gateways keep messages 7 days). Ids past the window move "
        "to an older tier filed by device-time hour (8 bytes per id); see "
        "[Dedup](#dedup-for-as-long-as-gateways-resend). Not above the window: the window is "
        "the horizon",
        renamed=_with_unit("DEDUP_HORIZON"),
    )
    dedup_max_recent_ids: int = setting(
        50_000,
        minimum=1,
        help="the most ids the recent tier keeps (1 MB in the device's state value, read and "
        "written every batch of the device; a device sending 11.9 messages a second for the "
        "window and its slack, 70 min, reaches it); past it the oldest move to the older tier "
        "early. See [Dedup](#dedup-for-as-long-as-gateways-resend)",
    )
    dedup_max_ids_per_hour: int = setting(
        50_000,
        minimum=1,
        help="the most ids the older tier keeps per device-time hour (400 KB; 13.9 messages a "
        "second for a whole hour, or a device whose clock stands still); past it the oldest "
        "filed are forgotten and counted (a resend of one is enriched again, never lost). See "
        "[Dedup](#dedup-for-as-long-as-gateways-resend)",
    )
    max_latest_values: int = setting(
        100,
        minimum=1,
        help="the most quantities a device snapshot keeps (`latest_values`; names over 128 "
        "characters are never kept); measurements past the cap are counted in "
        "`latest_values_dropped`, so device-chosen names cannot grow the state or the snapshot "
        "record without bound",
    )
    max_parked_bytes: int = setting(
        32 << 20,
        minimum=1,
        unit="bytes",
        help="the most bytes (32 MiB) one device keeps parked waiting for master data; a "
        "message past it is dead-lettered at once with reason `PARKED_BYTES_LIMIT`. See "
        "[Parked messages](#parked-messages-passing-failures)",
    )
    driver_memory: str = setting(
        "2g",
        help="`spark.driver.memory` of a local run (`make run`, devstack), where the keyed state "
        "runs in the driver; a cluster takes the chart's `enricher.driver.memory` / "
        "`enricher.executor.memory` (2g each, with `memoryOverhead` 1g each beside the heap). "
        "See [Memory](#memory-of-the-keyed-state)",
    )
    spark_master: str = setting(
        "", shown="(spark-submit's, else `local[*]`)", help="Spark master when run directly"
    )
    shuffle_partitions: int = setting(
        4,
        minimum=1,
        help="`spark.sql.shuffle.partitions`: partitions of the keyed state. Fixed by the "
        "checkpoint once started, so it bounds how far a cluster scales out; on one 2-core "
        "machine 2 sustained 25% more than 4 "
        "([benchmarks](benchmarks.md#the-jvm-state-operator-issue-27))",
    )
    metrics_port: int = setting(
        0,
        minimum=0,
        help="Prometheus scrape port (`0`: off); OTLP export when `OTEL_EXPORTER_OTLP_ENDPOINT` "
        "is set (the other `OTEL_*` variables: "
        "[operations.md](operations.md#opentelemetry-settings))",
    )
    #: What one message may cost the normalize step (budget.py; read again by each worker).
    normalize_budget: Budget = field(default_factory=Budget)
    topics: EnricherTopics = field(default_factory=EnricherTopics)
    kafka: KafkaSettings = field(default_factory=KafkaSettings)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **given: Any) -> Self:
        """Read the settings, the budget, the topic prefix and Kafka's; SettingError if bad."""
        given.setdefault("normalize_budget", Budget.from_env(env))
        given.setdefault(
            "topics", EnricherTopics.with_prefix(TopicPrefix.from_env(env).topic_prefix)
        )
        given.setdefault("kafka", KafkaSettings.from_env(env))
        return super().from_env(env, **given)

    @classmethod
    def from_args(
        cls, args: argparse.Namespace, env: Mapping[str, str] | None = None, **given: Any
    ) -> Self:
        """Read the settings as :meth:`from_env` does; the command's flags win."""
        prefix = TopicPrefix.from_args(args, env).topic_prefix
        given.setdefault("normalize_budget", Budget.from_env(env))
        given.setdefault("topics", EnricherTopics.with_prefix(prefix))
        given.setdefault("kafka", KafkaSettings.from_args(args, env))
        return super().from_args(args, env, **given)

    def check(self) -> None:
        """Raise SettingError on a value no single parse can refuse."""
        if not _JVM_MEMORY.fullmatch(self.driver_memory):
            raise SettingError(
                f"{self.variable('driver_memory')}={self.driver_memory!r}: use a JVM size such "
                "as 2g or 1536m"
            )
