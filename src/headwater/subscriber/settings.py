"""Settings of one subscriber, read from ``HEADWATER_SUBSCRIBER_*`` or given in code."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, cast

from headwater.runtime.env import SettingError, env_float, env_int, env_str
from headwater.topics import COMPLETIONS_TOPIC

#: Where a brand-new group may start; there is deliberately no default.
StartPoint = Literal["earliest", "latest"]


@dataclass(frozen=True)
class SubscriberSettings:
    """Everything a subscriber can be configured with (the table in docs/subscribe.md)."""

    #: The consumer group: the subscriber's identity, its committed offsets and its name in
    #: the dead-letter topic.
    group_id: str
    topics: tuple[str, ...] = (COMPLETIONS_TOPIC,)
    #: Where records whose handler keeps failing are parked; default ``<group>.deadletter.v1``.
    dead_letter_topic: str = ""
    #: Handler calls per record (the first one included) before it is parked.
    max_attempts: int = 5
    backoff_initial_s: float = 0.2
    backoff_max_s: float = 5.0
    #: A handler call that takes longer fails with TimeoutError (and is retried); 0: no limit.
    handler_timeout_s: float = 30.0
    #: Only for a partition the group has never committed an offset for: where to begin.
    #: Never applied to an offset that fell out of the log. Pass it on a first run only.
    start: StartPoint | None = None
    #: Records per poll; a batch is committed per partition once it is done.
    max_batch: int = 200
    #: Longest gap between polls before the broker hands the partitions to another member:
    #: keep ``max_batch`` times the slowest handling (retries included) under it.
    max_poll_interval_s: float = 300.0
    #: How long the broker waits for a silent member (a crashed process) before its
    #: partitions move to the others; heartbeats go every third of it.
    session_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if not self.group_id:
            raise SettingError("a subscriber needs a group_id (HEADWATER_SUBSCRIBER_GROUP_ID)")
        if not self.topics:
            raise SettingError("a subscriber needs at least one topic")
        if self.start not in (None, "earliest", "latest"):
            raise SettingError(f"start={self.start!r}: use earliest or latest (or leave it unset)")
        if self.max_attempts < 1:
            raise SettingError(f"max_attempts={self.max_attempts} must be at least 1")

    @property
    def dead_letter(self) -> str:
        """Return the dead-letter topic this subscriber parks records on."""
        return self.dead_letter_topic or f"{self.group_id}.deadletter.v1"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> SubscriberSettings:
        """Read ``HEADWATER_SUBSCRIBER_*``; raise SettingError naming a bad variable."""
        env = os.environ if env is None else env
        p = "HEADWATER_SUBSCRIBER_"
        start = env_str(env, p + "START", "")
        if start not in ("", "earliest", "latest"):
            raise SettingError(f"{p}START={start!r}: use earliest or latest (or leave it unset)")
        topics = tuple(t.strip() for t in env_str(env, p + "TOPICS", COMPLETIONS_TOPIC).split(","))
        return cls(
            group_id=env_str(env, p + "GROUP_ID", ""),
            topics=tuple(t for t in topics if t),
            dead_letter_topic=env_str(env, p + "DEAD_LETTER_TOPIC", ""),
            max_attempts=env_int(env, p + "MAX_ATTEMPTS", cls.max_attempts, 1),
            backoff_initial_s=env_float(env, p + "BACKOFF_INITIAL_S", cls.backoff_initial_s),
            backoff_max_s=env_float(env, p + "BACKOFF_MAX_S", cls.backoff_max_s),
            handler_timeout_s=env_float(env, p + "HANDLER_TIMEOUT_S", cls.handler_timeout_s),
            start=cast(StartPoint, start) if start else None,
            max_batch=env_int(env, p + "MAX_BATCH", cls.max_batch, 1),
            max_poll_interval_s=env_float(
                env, p + "MAX_POLL_INTERVAL_S", cls.max_poll_interval_s, 1.0
            ),
            session_timeout_s=env_float(env, p + "SESSION_TIMEOUT_S", cls.session_timeout_s, 1.0),
        )
