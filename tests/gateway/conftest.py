"""Gateway tests run against the real ingest service on the session broker."""

from __future__ import annotations

from tests.ingest.conftest import (  # noqa: F401  (fixtures)
    TOKENS,
    ingest_settings,
    ingest_topics,
    start_ingest,
    tokens_file,
)
