"""The reasons a dead letter can carry, with what each means (``dlq --help`` lists them).

A module of its own, with no Kafka client, so the command line can list them without
loading one.
"""

#: The reasons a dead letter carries (docs/enricher.md, "Completions"), for ``--help``.
REASONS = {
    "ENVELOPE_UNDECODABLE": "the ingest record is no device message",
    "ENVELOPE_INVALID": "missing ids, an invalid device_time or sequence",
    "CONTENT_TYPE_INVALID": "a content type that does not parse",
    "UNKNOWN_FORMAT": "no normalizer for the content type",
    "CHARSET_UNSUPPORTED": "a charset the normalizer does not know",
    "PAYLOAD_UNDECODABLE": "the payload does not decode in its format",
    "PAYLOAD_INVALID": "the payload decodes but breaks the format's rules",
    "UNIT_UNKNOWN": "a unit the enricher does not know",
    "NORMALIZE_BUDGET": "over the CPU budget of one message",
    "NORMALIZE_TOO_LARGE": "over the size bounds of one message",
    "SPARKPLUG_LIMIT": "over the Sparkplug caps",
    "UNENCODABLE_VALUE": "a value no encoder accepts (a lone surrogate)",
    "STATE_FAILED": "an unforeseen failure building the events",
    "PRODUCE_REFUSED": "a record the producer refused (no original value kept)",
    "MASTER_DATA_MISSING": "still no master data after MAX_ATTEMPTS",
    "DEFINITIONS_LIMIT": "Sparkplug definitions over their cap (JVM state operator)",
    "EVENT_TOO_LARGE": "an event over its size bound (JVM state operator)",
    "PARKED_LIMIT": "the device holds its maximum of parked messages (JVM state operator)",
}
