"""OPC UA data changes as OPC UA PubSub JSON (OPC 10000-14, 7.2.5), the form the enricher reads.

One network message per data change, with one data-set message whose payload has one
field: a DataValue in the 1.04 JSON encoding (``{"Value": {"Type": 11, "Body": 21.5},
"Status": 0, "SourceTimestamp": ..., "ServerTimestamp": ...}``). A gap (the connector
lost the server and values may be missing) is a data-set message with the status
``BadNoCommunication`` and the times the link was lost and back: the enricher takes no
measurement from it, and anyone reading the ingest topic sees where data is missing.

A data change of an item with an engineering unit carries it in its DataValue as
``"EngineeringUnits"``: the item's EUInformation (OPC 10000-8, 5.6.3) in the JSON encoding,
members with default values left out (``{"NamespaceUri": ..., "UnitId": 4408652,
"DisplayName": {"Text": "°C"}}``). Not in the standard's DataValue (the unit is in the
data-set metadata, which a message of its own would carry): the enricher reads the unit
from there.
"""

from __future__ import annotations

import json
import math
import uuid
from datetime import UTC, datetime
from typing import Any

CONTENT_TYPE = "application/vnd.opcfoundation.uapubsub+json"
#: OPC 10000-4, 7.34.2: communication with the data source failed.
BAD_NO_COMMUNICATION = 0x80310000
#: Built-in types (OPC 10000-6, 5.1.2) whose JSON body is a string: Int64, UInt64.
_LONG_TYPES = (8, 9)


def iso(when: datetime | None) -> str | None:
    """Return an OPC UA JSON DateTime (UTC, ISO 8601 with Z), or None."""
    if when is None:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def body(type_id: int, value: Any) -> Any:
    """Return a Variant body in the JSON encoding of its built-in type."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if type_id in _LONG_TYPES and isinstance(value, int):
        return str(value)
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    if isinstance(value, datetime):
        return iso(value)
    if isinstance(value, list):
        return [body(type_id, v) for v in value]
    return str(value)


def eu_information(
    namespace_uri: str | None, unit_id: int, display_name: str | None, description: str | None
) -> dict[str, Any]:
    """Return an EUInformation in the JSON encoding (members with default values left out)."""
    doc: dict[str, Any] = {}
    if namespace_uri:
        doc["NamespaceUri"] = namespace_uri
    if unit_id:
        doc["UnitId"] = unit_id
    if display_name:
        doc["DisplayName"] = {"Text": display_name}
    if description:
        doc["Description"] = {"Text": description}
    return doc


def data_change(
    publisher_id: str,
    writer_id: int,
    sequence: int,
    field: str,
    type_id: int,
    value: Any,
    status: int,
    source_time: datetime | None,
    server_time: datetime | None,
    engineering_units: dict[str, Any] | None = None,
) -> bytes:
    """Return the network message of one data change (of an item with these units)."""
    data_value: dict[str, Any] = {"Value": {"Type": type_id, "Body": body(type_id, value)}}
    if engineering_units:
        data_value["EngineeringUnits"] = engineering_units
    if status:
        data_value["Status"] = status
    if source_time is not None:
        data_value["SourceTimestamp"] = iso(source_time)
    if server_time is not None:
        data_value["ServerTimestamp"] = iso(server_time)
    stamp = iso(source_time or server_time or datetime.now(UTC))
    return _network(publisher_id, writer_id, sequence, stamp, "ua-deltaframe", {field: data_value})


def gap(
    publisher_id: str, sequence: int, fields: list[str], lost: datetime, back: datetime
) -> bytes:
    """Return the network message that marks values missing between ``lost`` and ``back``."""
    status = {"Status": BAD_NO_COMMUNICATION, "SourceTimestamp": iso(lost)}
    doc = json.loads(
        _network(publisher_id, 0, sequence, iso(back), "ua-keyframe", dict.fromkeys(fields, status))
    )
    doc["Messages"][0]["Status"] = BAD_NO_COMMUNICATION
    doc["Messages"][0]["GapStart"] = iso(lost)  # not in the standard: for people reading it
    doc["Messages"][0]["GapEnd"] = iso(back)
    return json.dumps(doc).encode()


def _network(
    publisher_id: str,
    writer_id: int,
    sequence: int,
    stamp: str | None,
    kind: str,
    payload: dict[str, Any],
) -> bytes:
    doc = {
        "MessageId": uuid.uuid4().hex,
        "MessageType": "ua-data",
        "PublisherId": publisher_id,
        "Messages": [
            {
                "DataSetWriterId": writer_id,
                "SequenceNumber": sequence,
                "Timestamp": stamp,
                "MessageType": kind,
                "Payload": payload,
            }
        ],
    }
    return json.dumps(doc).encode()
