"""Every acknowledged message read back from Kafka, at the partition and offset its OK named."""

from __future__ import annotations

from collections.abc import Mapping

from headwater import record_headers as rh
from headwater_dev.bench.faults.ledger import coordinate
from headwater_dev.devstack.readback import read_topic


def confirm(bootstrap: str, topic: str, phases: Mapping[str, Mapping[int, str]]) -> dict:
    """Read ``topic`` to its end once; per phase, count its OKs missing or altered in Kafka.

    ``phases``: each phase's OKs (packed coordinate -> message id). An OK is lost when no
    record is at its coordinate, altered when the record there carries another message id.

    Returns:
        ``{"records": n, "<phase>": {"lost": n, "altered": n}, ...}``
    """
    found = dict.fromkeys(phases, 0)
    altered = dict.fromkeys(phases, 0)
    records = 0
    for msg in read_topic(bootstrap, topic):
        records += 1
        packed = coordinate(msg.partition() or 0, msg.offset() or 0)
        for name, acked in phases.items():
            message_id = acked.get(packed)
            if message_id is not None:
                headers: dict[str, bytes] = dict(msg.headers() or [])  # type: ignore[arg-type]
                same = headers.get(rh.MESSAGE_ID, b"").decode() == message_id
                found[name] += same
                altered[name] += not same
                break
    out: dict = {"records": records}
    for name, acked in phases.items():
        out[name] = {"lost": len(acked) - found[name] - altered[name], "altered": altered[name]}
    return out
