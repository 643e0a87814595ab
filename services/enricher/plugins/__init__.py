"""The public API for vendor-format plugins (entry-point group ``headwater.normalizers``).

A plugin imports what it builds a normalizer from here (``Normalized``, ``measure``,
``load_json``, ``NormalizeError``, ``batch_normalizer`` ...) and tests it with
:func:`normalize_message`, the enricher's own normalize step (docs/enricher.md, "Adding a
vendor format"). Everything here is the same object the enricher's hop uses
(:mod:`headwater.enricher.hop`), so a plugin never depends on the hop's layout.
"""

from headwater.enricher.hop.formats import (
    REGISTRY,
    BatchNormalizer,
    Measurement,
    MetricDef,
    Normalized,
    NormalizeError,
    Normalizer,
    Pending,
    batch_normalizer,
    batch_of,
    decode_text,
    load_json,
    measure,
    measurer,
    register,
)
from headwater.enricher.hop.normalize import columns, normalize_batch, normalize_message

__all__ = [
    "REGISTRY",
    "BatchNormalizer",
    "Measurement",
    "MetricDef",
    "NormalizeError",
    "Normalized",
    "Normalizer",
    "Pending",
    "batch_normalizer",
    "batch_of",
    "columns",
    "decode_text",
    "load_json",
    "measure",
    "measurer",
    "normalize_batch",
    "normalize_message",
    "register",
]
