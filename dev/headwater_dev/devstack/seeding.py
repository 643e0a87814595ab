"""What the dev stack seeds before traffic flows: the tokens file and device master data.

``devstack run`` seeds its simulated fleet, ``devstack up`` its one demo gateway and device;
both write the same tokens-file shape ingest reads and publish master data with
``headwater master``'s own writer, as an operator's load would.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from headwater.ingest.admission.auth import hash_token
from headwater.kafka.settings import resolve_kafka
from headwater.master import store as master_store
from headwater.proto.master.v1 import device_master_pb2
from headwater.topics import MASTER_DEVICES_TOPIC


@dataclass(frozen=True)
class GatewayEntry:
    """One gateway of the tokens file: its id, tenant, bearer token and device patterns."""

    gateway_id: str
    tenant: str
    token: str
    devices: tuple[str, ...]


def tokens_yaml(gateways: Iterable[GatewayEntry], comment: str = "") -> str:
    """Return a tokens file for ``gateways`` (only the tokens' SHA-256 is written)."""
    lines = [f"# {comment}"] if comment else []
    lines.append("gateways:")
    for gw in gateways:
        patterns = ", ".join(f'"{p}"' for p in gw.devices)
        lines += [
            f"  - id: {gw.gateway_id}",
            f"    tenant: {gw.tenant}",
            f"    token_sha256: {hash_token(gw.token)}",
            f"    devices: [{patterns}]",
        ]
    return "\n".join(lines) + "\n"


def publish_master(bootstrap: str, records: list[device_master_pb2.DeviceMaster]) -> int:
    """Write master records to the master-data topic; raises MasterStoreError when not acked."""
    return master_store.write(resolve_kafka(bootstrap), MASTER_DEVICES_TOPIC, records)
