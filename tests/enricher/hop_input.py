"""The Python hop's input columns (``arrow_hop.inputs``), built from records, for pure hop tests.

What Spark hands ``arrow_hop.hop_rows``: the source topic, the device key and the record's value,
then the headers decode reads (the last of each name, null when absent).
"""

from __future__ import annotations

import pyarrow as pa

from headwater.enricher.hop.arrow_hop import HEADERS
from headwater.enricher.topics import EnricherTopics
from tests.support.kafkatools import Msg, envelope, ingest_headers

TOPICS = EnricherTopics.with_prefix("hop.")


#: A record as the hop reads it: topic, device key, value, headers.
Record = tuple[str, str, bytes, list[tuple[str, bytes]]]


def columns(records: list[Record]) -> list[pa.Array]:
    """Return the hop's input columns of ``(topic, device key, value, headers)`` records."""
    found = [dict(headers) for _, _, _, headers in records]
    return [
        pa.array([r[0] for r in records]),
        pa.array([r[1] for r in records]),
        pa.array([r[2] for r in records], pa.binary()),
        *[pa.array([f.get(name) for f in found], pa.binary()) for name in HEADERS],
    ]


def ingest(m: Msg, value: bytes | None = None) -> Record:
    """Return the record of ``m`` on the telemetry topic (``value``: its envelope, or another)."""
    value = envelope(m) if value is None else value
    return (TOPICS.ingest[0], m.device_id, value, ingest_headers(m))
