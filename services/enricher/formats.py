"""Deprecated: import from :mod:`headwater.enricher.plugins` (this path goes in the next release).

``from headwater.enricher.formats import ...`` was the import docs/enricher.md gave normalizer
plugins; it keeps working for one release, with the same objects, and warns.
"""

import warnings

from headwater.enricher.hop.formats import *  # noqa: F403  (the same names, same objects)
from headwater.enricher.hop.formats import __all__ as __all__

warnings.warn(
    "headwater.enricher.formats is deprecated: import from headwater.enricher.plugins",
    DeprecationWarning,
    stacklevel=2,
)
