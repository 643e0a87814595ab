"""Vendor formats: one module per format, each registering its normalizer by media type.

Importing this package registers the built-in formats; :mod:`.registry` also loads the
normalizers that installed packages declare (entry-point group ``headwater.normalizers``).
"""

from headwater.enricher.executor.formats import acme, globex, initech, opcua, sparkplug
from headwater.enricher.executor.formats.base import (
    Measurement,
    MetricDef,
    Normalized,
    NormalizeError,
    Normalizer,
    Pending,
    decode_text,
    load_json,
    measure,
)
from headwater.enricher.executor.formats.registry import REGISTRY, register

__all__ = [
    "REGISTRY",
    "Measurement",
    "MetricDef",
    "NormalizeError",
    "Normalized",
    "Normalizer",
    "Pending",
    "acme",
    "decode_text",
    "globex",
    "initech",
    "load_json",
    "measure",
    "opcua",
    "register",
    "sparkplug",
]
