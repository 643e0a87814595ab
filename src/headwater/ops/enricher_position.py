"""The enricher's position: its checkpoint and the group it copies its progress to.

Declared once, here: the enricher's settings inherit these two, and the operator commands
(``lag``, ``status``, ``offsets checkpoint``), which run without Spark, read the same
``HEADWATER_ENRICHER_*`` variables with the same defaults, so on its pod they need no flags.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from headwater.runtime.settings import Settings, setting

#: The consumer group the enricher commits its progress to, for monitoring only (the
#: enricher's ``progress_offsets.py``); ``headwater lag`` and ``status`` look at it by default.
DEFAULT_PROGRESS_GROUP = "headwater-enricher"


@dataclass(frozen=True)
class EnricherPosition(Settings):
    """The enricher's checkpoint, and the consumer group it copies its position to."""

    env_prefix: ClassVar[str] = "HEADWATER_ENRICHER_"

    checkpoint_location: str = setting(
        ".headwater/enricher/checkpoint",
        flag=True,
        help="Spark checkpoint (offsets, keyed state): local directory, volume or object store "
        "URL (`s3a://...`)",
    )
    progress_group: str = setting(
        DEFAULT_PROGRESS_GROUP,
        help="consumer group the end offsets of every finished batch are committed to, **for "
        "monitoring only** (`headwater lag`, `headwater status`, Kafka lag exporters); the query "
        "never reads them, restarts use the checkpoint; `off`: commit nothing "
        "([operations.md](operations.md#enricher-lag))",
    )

    @property
    def group(self) -> str:
        """The progress group to look at (its default when the enricher's is ``off``)."""
        group = self.progress_group
        return group if group.lower() not in ("", "off") else DEFAULT_PROGRESS_GROUP

    @property
    def commit_group(self) -> str:
        """The group the progress is committed to; "" when turned off (``off``)."""
        return "" if self.progress_group.lower() in ("", "off") else self.progress_group
