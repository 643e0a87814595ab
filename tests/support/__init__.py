"""Helpers shared by the test packages: reading Kafka, an ingest server, enricher queries,
vendor payloads, the chart rendered and its monitoring, the fault proxy, TLS material
(docs/design.md, "The packages")."""
