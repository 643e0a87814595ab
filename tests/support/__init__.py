"""Helpers shared by the test packages: reading Kafka, the fault proxy, TLS material."""
