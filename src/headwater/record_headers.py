"""Names of the Kafka record headers the ingest service writes on every ingest record.

The enricher, the dead-letter tools and the subscribers read them by these names.
"""

MESSAGE_ID = "message-id"
GATEWAY_ID = "gateway-id"
TENANT = "tenant"
CONTENT_TYPE = "content-type"
#: Milliseconds since the epoch, as ASCII digits, when the ingest service received it.
RECEIVED_AT_MS = "received-at-ms"
#: The ingest endpoint ("telemetry", "alarms").
ENDPOINT = "endpoint"
#: W3C trace context (https://www.w3.org/TR/trace-context/).
TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"

#: Audit headers ``headwater dlq redrive`` adds. A record redriven twice carries two of each,
#: oldest first: the enricher turns them into the dead letter's redrive history.
REDRIVE_BY = "redrive-by"
REDRIVE_AT_MS = "redrive-at-ms"
REDRIVE_REASON = "redrive-reason"
#: How many times this message was redriven, the latest one counting (ASCII digits).
REDRIVE_COUNT = "redrive-count"
