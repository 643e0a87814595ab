"""Settings of the command parts of an ingest replica (HEADWATER_INGEST_COMMANDS_*)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from headwater.runtime.env import env_bool, env_float, env_int, env_str


@dataclass(frozen=True)
class CommandSettings:
    """How a replica delivers commands and relays their status reports."""

    #: Serve ReceiveCommands and relay reports at all.
    enabled: bool = True
    #: Prefix of commands.v1 and command-status.v1 (the reports topic has none: it is an
    #: endpoint's, see headwater.endpoints).
    topic_prefix: str = ""
    #: Consumer group of the relay; every replica joins it, so each report is relayed once.
    relay_group: str = "headwater-ingest-command-relay"
    #: How soon the relay's group notices a replica gone without leaving (killed): until
    #: then, the reports of its partitions wait. 6 s is the broker's smallest by default.
    relay_session_timeout_seconds: float = 6.0
    #: Static membership of the relay's group: a replica restarted with the same id takes
    #: its partitions back at once, without waiting for the session timeout. Default: the
    #: pod's name ($POD_NAME), which a restarted container keeps; empty: dynamic.
    relay_instance_id: str = ""
    #: Commands sent on one stream and not yet acknowledged, at most.
    max_unacked: int = 64
    #: Open ReceiveCommands streams per gateway, at most (one is normal: a reconnect
    #: briefly makes two).
    max_streams_per_gateway: int = 2
    #: Seconds a device's owner may be without a command stream (a restart, a reconnect)
    #: before another gateway bound to the device takes its commands over.
    owner_grace_seconds: float = 5.0
    #: Ids of delivered and finished commands remembered, so a repeated command id or a
    #: late report is recognised. Oldest are forgotten first.
    remembered_ids: int = 1_000_000
    #: How often commands past their expiry are looked for and marked EXPIRED.
    expiry_check_seconds: float = 1.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> CommandSettings:
        """Read the settings from the environment; raise SettingError on a bad value."""
        env = os.environ if env is None else env
        return cls(
            enabled=env_bool(env, "HEADWATER_INGEST_COMMANDS_ENABLED", cls.enabled),
            topic_prefix=env_str(env, "HEADWATER_INGEST_COMMANDS_TOPIC_PREFIX", ""),
            relay_group=env_str(env, "HEADWATER_INGEST_COMMANDS_RELAY_GROUP", cls.relay_group),
            relay_session_timeout_seconds=env_float(
                env,
                "HEADWATER_INGEST_COMMANDS_RELAY_SESSION_TIMEOUT_SECONDS",
                cls.relay_session_timeout_seconds,
                1.0,
            ),
            relay_instance_id=env_str(
                env, "HEADWATER_INGEST_COMMANDS_RELAY_INSTANCE_ID", env.get("POD_NAME", "")
            ),
            max_unacked=env_int(env, "HEADWATER_INGEST_COMMANDS_MAX_UNACKED", cls.max_unacked, 1),
            max_streams_per_gateway=env_int(
                env,
                "HEADWATER_INGEST_COMMANDS_MAX_STREAMS_PER_GATEWAY",
                cls.max_streams_per_gateway,
                1,
            ),
            owner_grace_seconds=env_float(
                env, "HEADWATER_INGEST_COMMANDS_OWNER_GRACE_SECONDS", cls.owner_grace_seconds, 0.0
            ),
            remembered_ids=env_int(
                env, "HEADWATER_INGEST_COMMANDS_REMEMBERED_IDS", cls.remembered_ids, 1000
            ),
            expiry_check_seconds=env_float(
                env, "HEADWATER_INGEST_COMMANDS_EXPIRY_CHECK_SECONDS", 1.0, 0.05
            ),
        )
