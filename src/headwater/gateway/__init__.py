"""Gateway client: a durable local spool and a sender to the ingest service."""
