"""How the per-device state behaves: the enricher's settings the JVM operator is given.

``jvm_state.policy_lines`` hands it to ``io.headwater.enricher.state.Policy`` as ``key=value``
lines, so no Python object enters the JVM.
"""

from __future__ import annotations

from dataclasses import dataclass

from headwater.enricher.topics import EnricherTopics

HOUR_MS = 3_600_000


@dataclass(frozen=True)
class Policy:
    """Topics, retries, dedup and snapshot bounds of the keyed state (``job.policy_of``)."""

    topics: EnricherTopics
    max_attempts: int
    backoff_ms: int
    backoff_max_ms: int
    dedup_window_ms: int
    #: The most quantities kept in a device's snapshot (``latest_values``).
    max_latest_values: int = 100
    #: How long message ids are remembered at all (older ids by device-time hour).
    dedup_horizon_ms: int = 7 * 24 * HOUR_MS + HOUR_MS
    #: The most bytes one device keeps parked waiting for master data.
    max_parked_bytes: int = 32 << 20
    #: The most ids of the recent dedup tier (in the device value); past it the oldest spill.
    dedup_max_recent_ids: int = 50_000
    #: The most ids one device-time hour of the older dedup tier keeps; past it the oldest go.
    dedup_max_ids_per_hour: int = 50_000
