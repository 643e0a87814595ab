"""The normalizer registry: built-in formats, plus those installed packages add.

A package installed beside Headwater adds a format without forking it by declaring an entry
point in the group ``headwater.normalizers``: the entry point's *name* is the media type
(``type/subtype``) and its *object* the normalizer, ``fn(payload, media) -> Normalized``::

    [project.entry-points."headwater.normalizers"]
    "application/vnd.example.meter.v1+json" = "example_meter:normalize"

A normalizer made with ``formats.batch_normalizer`` (a generator over a batch's payloads of
its media type) also carries that batch form, which the enricher then uses.

Entry points are loaded once per process, on first use (the driver at start-up, each Spark
Python worker when it normalizes its first message). A plugin that fails to load, or that
names a built-in format, is skipped with a log line; it never stops the query.
"""

from __future__ import annotations

import inspect
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points

from headwater.enricher.hop import media_type
from headwater.enricher.hop.formats.base import Normalizer

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "headwater.normalizers"

#: Media type essence (``type/subtype``, lower case) -> normalizer.
REGISTRY: dict[str, Normalizer] = {}


@dataclass(frozen=True)
class Loaded:
    """One line of what the registry holds: the media type and where it came from."""

    content_type: str
    origin: str  # "builtin", or "<distribution> <version>: <module:attr>"
    error: str = ""


_BUILTIN: set[str] = set()
_PLUGINS: list[Loaded] = []
_plugins_loaded = False
_lock = threading.Lock()


def register(content_type: str) -> Callable[[Normalizer], Normalizer]:
    """Register the decorated function as the built-in normalizer of ``content_type``."""
    essence = media_type.parse(content_type).essence

    def add(fn: Normalizer) -> Normalizer:
        REGISTRY[essence] = fn
        _BUILTIN.add(essence)
        return fn

    return add


def lookup(essence: str) -> Normalizer | None:
    """Return the normalizer of a media type essence, loading entry points on first use."""
    if not _plugins_loaded:
        load_plugins()
    return REGISTRY.get(essence)


def load_plugins() -> list[Loaded]:
    """Load the ``headwater.normalizers`` entry points (once per process); return them all."""
    global _plugins_loaded
    with _lock:
        if not _plugins_loaded:
            _PLUGINS.extend(_load_entry_points())
            _plugins_loaded = True
    return list(_PLUGINS)


def reload_plugins() -> list[Loaded]:
    """Forget loaded plugins and load the entry points again (tests, after an install)."""
    global _plugins_loaded
    with _lock:
        for p in _PLUGINS:
            if not p.error:
                REGISTRY.pop(p.content_type, None)
        _PLUGINS.clear()
        _plugins_loaded = False
    return load_plugins()


def loaded() -> list[Loaded]:
    """Return every registered format, built-ins first, then plugins (errors included)."""
    load_plugins()
    return [Loaded(ct, "builtin") for ct in sorted(_BUILTIN)] + list(_PLUGINS)


def _load_entry_points() -> list[Loaded]:
    out = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        dist = f"{ep.dist.name} {ep.dist.version}" if ep.dist is not None else "?"
        origin = f"{dist}: {ep.value}"
        try:
            essence = media_type.parse(ep.name).essence
            if essence in _BUILTIN:
                raise ValueError(f"{essence!r} is a built-in format")
            if essence in REGISTRY:
                raise ValueError(f"{essence!r} is already registered by another package")
            fn = ep.load()
            if not callable(fn):
                raise TypeError(f"{ep.value} is not callable")
            batch = getattr(fn, "batch", None)
            if batch is not None and not inspect.isgeneratorfunction(batch):
                # Its results are timed one by one (budget.each): a list would be built
                # whole before the first could be timed.
                raise TypeError(f"{ep.value}.batch is not a generator function")
        except Exception as exc:  # a broken plugin must not stop the enricher
            log.warning(
                "normalizer plugin skipped",
                extra={"content_type": ep.name, "origin": origin, "error": str(exc)},
            )
            out.append(Loaded(ep.name, origin, f"{type(exc).__name__}: {exc}"))
            continue
        REGISTRY[essence] = fn
        out.append(Loaded(essence, origin))
    return out
