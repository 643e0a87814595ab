"""Column layouts shared by the steps, as Spark DDL field lists (one place, so steps agree)."""

from __future__ import annotations

HEADERS = "array<struct<key:string,value:binary>>"

#: What ``decode`` adds: the envelope (or the master record) and a decode error, if any.
DECODED_FIELDS = (
    "kind string, device_key string, message_id string, device_id string, "
    "content_type string, device_time_ms long, sequence long, payload binary, "
    "tenant string, gateway_id string, received_ms long, endpoint string, "
    "site string, area_code string, vendor_format string, model string, "
    "master_deleted boolean, "
    "error_stage string, error_reason string, error_class string, error_message string"
)

#: What ``normalize`` adds: the common-format content of the message.
NORMALIZED_FIELDS = (
    "event_type string, source_format string, "
    "measurements array<struct<name:string,value:double,unit:string,time_ms:long>>, "
    "alarm_code string, alarm_severity int, alarm_text string, "
    # Sparkplug B: metric definitions of a birth certificate and readings that the keyed
    # state resolves against them (formats/sparkplug.py; the JVM operator's Definitions).
    "definitions array<struct<alias:long,name:string,unit:string,datatype:int>>, "
    "replaces_definitions boolean, "
    "pending array<struct<alias:long,name:string,value:double,unit:string,time_ms:long,"
    "datatype:int>>"
)

#: Sparkplug B: each unit a message names and how it converts (``units.rows``), or why it
#: cannot; the JVM has no unit library and converts the readings with these.
UNITS = (
    "units array<struct<spelling:string,canonical:string,scale:double,offset:double,error:string>>"
)

#: The source coordinates and original bytes every step keeps (for dead letters and retries).
SOURCE_FIELDS = (
    f"src_topic string, src_partition int, src_offset long, value binary, headers {HEADERS}"
)

#: The rows the keyed state receives (``keys.key_columns``): the key, then the source
#: fields (the JVM operator reads them by name).
KEYED = f"tenant string, device_key string, {SOURCE_FIELDS}"

#: One output row per Kafka record the sink produces (see ``kafka_sink``).
OUTPUT = (
    f"topic string, key binary, value binary, headers {HEADERS}, role string, label string, "
    "ref string, event_id string, received_ms long, batch_ms long"
)


def fields(ddl: str) -> list[str]:
    """Return the top-level fields ("name type") of a DDL field list (commas inside <> nest)."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(ddl + ","):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(ddl[start:i].strip())
            start = i + 1
    return out


def field_names(ddl: str) -> list[str]:
    """Return the top-level field names of a DDL field list."""
    return [f.split(" ")[0] for f in fields(ddl)]
