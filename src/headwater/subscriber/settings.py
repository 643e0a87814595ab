"""Settings of one subscriber, read from ``HEADWATER_SUBSCRIBER_*`` or given in code."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from headwater.runtime.env import SettingError
from headwater.runtime.settings import Renamed, Settings, setting
from headwater.topics import COMPLETIONS_TOPIC

#: Where a brand-new group may start; there is deliberately no default.
StartPoint = Literal["earliest", "latest"]

_P = "HEADWATER_SUBSCRIBER_"


def _seconds(name: str) -> tuple[Renamed, ...]:
    """The earlier ``_S`` spelling of a seconds setting, read for one release."""
    return (Renamed(f"{_P}{name}_S"),)


@dataclass(frozen=True)
class SubscriberSettings(Settings):
    """Everything a subscriber can be configured with (the table in docs/subscribe.md)."""

    env_prefix: ClassVar[str] = _P

    group_id: str = setting(
        help="the consumer group: the subscriber's identity, its committed offsets and its "
        "name in the dead-letter topic"
    )
    topics: tuple[str, ...] = setting((COMPLETIONS_TOPIC,), help="comma-separated topics")
    dead_letter_topic: str = setting(
        "",
        shown="<group>.deadletter.v1",
        help="where records whose handler keeps failing are parked",
    )
    max_attempts: int = setting(
        5, minimum=1, help="handler calls per record (the first one included) before it is parked"
    )
    backoff_initial_s: float = setting(
        0.2,
        unit="s",
        help="first retry delay (doubles, full jitter)",
        renamed=_seconds("BACKOFF_INITIAL"),
    )
    backoff_max_s: float = setting(
        5.0, unit="s", help="longest retry delay", renamed=_seconds("BACKOFF_MAX")
    )
    handler_timeout_s: float = setting(
        30.0,
        unit="s",
        help="a handler call running longer fails with `TimeoutError` (and is retried); "
        "`0`: no limit",
        renamed=_seconds("HANDLER_TIMEOUT"),
    )
    start: StartPoint | None = setting(
        None,
        help="where to begin, only for a partition the group has never committed an offset "
        "for (first run only); never applied to an offset that fell out of the log",
    )
    max_batch: int = setting(
        200, minimum=1, help="records per poll; a batch is committed per partition once done"
    )
    max_poll_interval_s: float = setting(
        300.0,
        minimum=1.0,
        unit="s",
        help="longest gap between polls before the group hands the partitions to another "
        "member: keep `max_batch` times the slowest handling (retries included) below it",
        renamed=_seconds("MAX_POLL_INTERVAL"),
    )
    session_timeout_s: float = setting(
        10.0,
        minimum=1.0,
        unit="s",
        help="how long a silent (crashed) member keeps its partitions before they move to the "
        "others (heartbeats every third of it); Kafka's minimum is 6 by default",
        renamed=_seconds("SESSION_TIMEOUT"),
    )

    def __post_init__(self) -> None:
        if not self.group_id:
            raise SettingError(f"a subscriber needs a group_id ({_P}GROUP_ID)")
        if not self.topics:
            raise SettingError(f"a subscriber needs at least one topic ({_P}TOPICS)")
        if self.start not in (None, "earliest", "latest"):
            raise SettingError(f"start={self.start!r}: use earliest or latest (or leave it unset)")
        if self.max_attempts < 1:
            raise SettingError(f"max_attempts={self.max_attempts} must be at least 1")

    @property
    def dead_letter(self) -> str:
        """Return the dead-letter topic this subscriber parks records on."""
        return self.dead_letter_topic or f"{self.group_id}.deadletter.v1"
