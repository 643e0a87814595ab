"""Deprecated: import from :mod:`headwater.enricher.plugins` (this path goes in the next release).

docs/enricher.md told plugin authors to test a normalizer with
``headwater.enricher.normalize.normalize_message``; it keeps working for one release, with the
same objects, and warns.
"""

import warnings

from headwater.enricher.plugins import (
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

warnings.warn(
    "headwater.enricher.normalize is deprecated: import from headwater.enricher.plugins",
    DeprecationWarning,
    stacklevel=2,
)
