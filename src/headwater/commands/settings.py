"""What ``headwater command send`` may do (``HEADWATER_COMMAND_*``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from headwater.runtime.settings import Settings, setting


@dataclass(frozen=True)
class SenderSettings(Settings):
    """The limits of the command-line sender."""

    env_prefix: ClassVar[str] = "HEADWATER_COMMAND_"

    tenants: tuple[str, ...] = setting(
        ("*",), help="tenants the CLI may command: comma-separated, `*` for any"
    )
