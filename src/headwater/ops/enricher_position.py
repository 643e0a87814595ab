"""Where the operator commands look for the enricher's position (its ``HEADWATER_ENRICHER_*``).

``lag``, ``status`` and ``offsets checkpoint`` read the same variables the enricher is run
with, so on its pod they need no flags.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from headwater.runtime.settings import Settings, setting

#: The enricher's progress group when ``HEADWATER_ENRICHER_PROGRESS_GROUP`` is unset or ``off``
#: (the same default as the enricher's settings).
ENRICHER_PROGRESS_GROUP = "headwater-enricher"


@dataclass(frozen=True)
class EnricherPosition(Settings):
    """The consumer group the enricher copies its position to, and its checkpoint."""

    env_prefix: ClassVar[str] = "HEADWATER_ENRICHER_"

    progress_group: str = setting(
        ENRICHER_PROGRESS_GROUP,
        help="the group the enricher commits its progress to, for monitoring (`off`: none)",
    )
    checkpoint_location: str = setting(
        "", help="the enricher's checkpoint directory (`offsets checkpoint` without `--checkpoint`)"
    )

    @property
    def group(self) -> str:
        """The progress group to look at (its default when the enricher's is ``off``)."""
        group = self.progress_group
        return group if group.lower() != "off" else ENRICHER_PROGRESS_GROUP
