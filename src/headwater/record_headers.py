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
