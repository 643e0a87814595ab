"""Kept for plugin imports: the normalize step is :mod:`headwater.enricher.executor.normalize`.

docs/enricher.md tells plugin authors to test a normalizer with
``headwater.enricher.normalize.normalize_message``; it keeps working, with the same objects.
"""

from headwater.enricher.executor.normalize import (
    REGISTRY,
    Normalized,
    NormalizeError,
    columns,
    normalize_batch,
    normalize_message,
    register,
)

__all__ = [
    "REGISTRY",
    "NormalizeError",
    "Normalized",
    "columns",
    "normalize_batch",
    "normalize_message",
    "register",
]
