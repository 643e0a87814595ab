"""Kept for plugin imports: the vendor formats live in :mod:`headwater.enricher.executor.formats`.

``from headwater.enricher.formats import NormalizeError, Normalized, load_json, measure`` is
the import that docs/enricher.md gives normalizer plugins (entry-point group
``headwater.normalizers``); it keeps working, with the same objects.
"""

from headwater.enricher.executor.formats import *  # noqa: F403  (the same names, same objects)
from headwater.enricher.executor.formats import __all__ as __all__
