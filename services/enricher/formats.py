"""Kept for plugin imports: the vendor formats live in :mod:`headwater.enricher.executor.formats`.

``from headwater.enricher.formats import NormalizeError, Normalized, load_json, measure`` is
the import that docs/enricher.md gives normalizer plugins (entry-point group
``headwater.normalizers``); it keeps working, with the same objects.
"""

from headwater.enricher.executor.formats import (
    REGISTRY,
    BatchNormalizer,
    Measurement,
    MetricDef,
    Normalized,
    NormalizeError,
    Normalizer,
    Pending,
    acme,
    batch_normalizer,
    batch_of,
    decode_text,
    globex,
    initech,
    load_json,
    measure,
    measurer,
    opcua,
    register,
    sparkplug,
)

__all__ = [
    "REGISTRY",
    "BatchNormalizer",
    "Measurement",
    "MetricDef",
    "NormalizeError",
    "Normalized",
    "Normalizer",
    "Pending",
    "acme",
    "batch_normalizer",
    "batch_of",
    "decode_text",
    "globex",
    "initech",
    "load_json",
    "measure",
    "measurer",
    "opcua",
    "register",
    "sparkplug",
]
