"""Settings of the command parts of an ingest replica (``HEADWATER_INGEST_COMMANDS_*``)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from headwater.runtime.settings import Settings, setting


@dataclass(frozen=True)
class CommandSettings(Settings):
    """How a replica delivers commands and relays their status reports."""

    env_prefix: ClassVar[str] = "HEADWATER_INGEST_COMMANDS_"

    enabled: bool = setting(
        True,
        help="serve `ReceiveCommands` and relay command reports "
        "([docs/commands.md](docs/commands.md)); needs the command topics "
        "(`headwater topics ensure`)",
    )
    #: The reports topic has none: it is an endpoint's, see headwater.endpoints.
    topic_prefix: str = setting(
        "", help="prefix of `commands.v1`, `command-status.v1` and `command-owners.v1`"
    )
    #: Every replica joins it, so each report is relayed once.
    relay_group: str = setting(
        "headwater-ingest-command-relay",
        help="consumer group relaying gateways' reports (every replica joins it)",
    )
    #: Until then, the reports of a killed replica's partitions wait. 6 s is the broker's
    #: smallest by default.
    relay_session_timeout_seconds: float = setting(
        6.0,
        minimum=1.0,
        unit="s",
        help="how soon the relay's group gives up on a replica that was killed (its "
        "partitions' reports wait until then)",
    )
    #: Unset: the pod's name ($POD_NAME), which a restarted container keeps (from_env).
    relay_instance_id: str = setting(
        "",
        shown="$POD_NAME",
        help="static membership of the relay's group: a replica restarted under the same id "
        "takes its partitions back at once; empty: dynamic. Must differ between replicas",
    )
    max_unacked: int = setting(
        64, minimum=1, help="commands sent on one stream and not yet acknowledged"
    )
    #: One is normal: a reconnect briefly makes two.
    max_streams_per_gateway: int = setting(
        2, minimum=1, help="open command streams per gateway; more get RESOURCE_EXHAUSTED"
    )
    #: The lease holder renews every quarter of it and relies on a record for three.
    owner_grace_seconds: float = setting(
        5.0,
        minimum=0.5,
        unit="s",
        help="how long a device's commands lease may go without renewal (its owning gateway "
        "without a command stream) before another gateway bound to the device takes its "
        "commands ([docs/commands.md](docs/commands.md#one-gateway-per-device))",
    )
    #: Oldest are forgotten first.
    remembered_ids: int = setting(
        1_000_000,
        minimum=1000,
        help="delivered and finished command ids remembered (a repeated id within them is "
        "not delivered again)",
    )
    expiry_check_seconds: float = setting(
        1.0,
        minimum=0.05,
        unit="s",
        help="how often commands past their expiry are marked `EXPIRED`",
    )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **given: Any) -> Self:
        """Read the settings; the relay's instance id is ``$POD_NAME`` when unset."""
        settings = super().from_env(env, **given)
        if settings.relay_instance_id:
            return settings
        pod = (os.environ if env is None else env).get("POD_NAME", "")
        return dataclasses.replace(settings, relay_instance_id=pod)
