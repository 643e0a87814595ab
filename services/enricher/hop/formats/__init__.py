"""Vendor formats: one module per format, each registering its normalizer by media type.

Importing this package registers the built-in formats; :mod:`.registry` also loads the
normalizers that installed packages declare (entry-point group ``headwater.normalizers``).
"""

from headwater.enricher.hop.formats import acme, globex, initech, opcua, sparkplug
from headwater.enricher.hop.formats.base import (
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
)
from headwater.enricher.hop.formats.registry import REGISTRY, register

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
