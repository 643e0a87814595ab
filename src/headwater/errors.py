"""The root of every error Headwater raises on purpose: :class:`HeadwaterError`.

One root lets a caller catch everything Headwater means to raise in one clause, and
``retriable`` lets it branch on behaviour rather than on class names (as aiokafka's
``KafkaError.retriable`` and temporal's ``non_retryable``): True when the same call may
succeed later with nothing changed (a broker back, a spool drained), False when a person or
the caller must change something first (a setting, a file, the input).

Errors that callers used to catch as ``ValueError`` or ``RuntimeError`` keep that class as a
second base, so ``except ValueError`` still works. How an error becomes a gRPC status is
decided in one place, the ingest service's ``status`` module, not here. Standard library
only: every part, the gateway library included, imports it.
"""

from __future__ import annotations


class HeadwaterError(Exception):
    """Root of every error Headwater raises on purpose; ``retriable`` says if retrying helps."""

    #: True when the same call may succeed later without anybody changing anything.
    retriable: bool = False


__all__ = ["HeadwaterError"]
