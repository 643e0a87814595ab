"""The pint units registry of this process: built once, its own caches held to a bound.

pint caches what it parses, keyed by the input and never evicted: the spelling, its
dimensionality, its root units, the definitions of prefixed units (``kPa`` becomes a unit of
its own). 40,000 distinct spellings added 77 MB to a worker (issue 35). ``units.py`` keeps its
own bounded cache of results, so pint's entries for a spelling buy nothing once the spelling
is resolved: when they have grown by more than :data:`GROWTH_MAX` since the registry was built,
:func:`trim` drops everything added since.

A trim may be interrupted by the normalize budget's timer (it runs inside a message's unit
work). It only deletes, and in an order that keeps pint consistent at every step: a parsed
spelling goes before the caches derived from it, and the unit definitions it names go last,
so no surviving cache entry names a definition that is gone.
"""

from __future__ import annotations

import threading
from collections import ChainMap
from collections.abc import MutableMapping
from typing import Any

#: Entries pint may add to its caches (over all of them) before :func:`trim` drops them.
#: A spelling of six factors adds about ten; a few thousand entries are a few MB.
GROWTH_MAX = 8_192

# pint's caches that grow with its input, in the order they are trimmed (see the docstring).
_CACHES = (
    "parse_unit",
    "dimensionality",
    "root_units",
    "conversion_factor",
    "dimensional_equivalents",
)

_lock = threading.Lock()
_registry: Any = None
#: Each grown mapping's keys when the registry was built, by name.
_baseline: dict[str, frozenset[Any]] = {}


def ready() -> bool:
    """Return True once this process has built the registry."""
    return _registry is not None


def registry() -> Any:
    """Return this process's pint registry, built on first use (~0.4 s)."""
    global _registry
    if _registry is None:
        with _lock:
            if _registry is None:
                import pint

                ureg: Any = pint.UnitRegistry(autoconvert_offset_to_baseunit=True)
                _baseline.update({name: frozenset(m) for name, m in _mappings(ureg).items()})
                _registry = ureg
    return _registry


def growth() -> int:
    """Return how many entries pint's caches hold beyond those it was built with."""
    maps = _mappings(registry())
    return sum(len(m) for m in maps.values()) - sum(len(keys) for keys in _baseline.values())


def trim() -> bool:
    """Drop what pint cached since it was built, when that is more than :data:`GROWTH_MAX`.

    Returns True when it trimmed.
    """
    if growth() <= GROWTH_MAX:
        return False
    with _lock:
        for name, m in _mappings(registry()).items():
            keep = _baseline.get(name, frozenset())
            for key in [k for k in m if k not in keep]:
                m.pop(key, None)
    return True


def _mappings(ureg: Any) -> dict[str, MutableMapping[Any, Any]]:
    """Pint's growing mappings by name, in trimming order (private attributes of pint 0.25)."""
    cache = ureg._cache
    out: dict[str, MutableMapping[Any, Any]] = {name: getattr(cache, name) for name in _CACHES}
    out["base_units"] = ureg._base_units_cache
    units = ureg._units
    # The context facet wraps the definitions in a ChainMap; new ones are written to maps[0].
    out["units"] = units.maps[0] if isinstance(units, ChainMap) else units
    return out
