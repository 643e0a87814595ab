"""The modules of the src/headwater libraries (not the services, not the dev tooling)."""

from __future__ import annotations

import importlib
import pkgutil

#: The library packages; the services and the dev tooling are converted in a pass of their own.
LIBRARIES = (
    "headwater.commands",
    "headwater.gateway",
    "headwater.kafka",
    "headwater.master",
    "headwater.ops",
    "headwater.runtime",
    "headwater.subscriber",
)
ROOT_MODULES = ("headwater.contracts", "headwater.endpoints", "headwater.topics", "headwater.wire")


def library_modules() -> list[str]:
    """Every module of the libraries and the root modules, by dotted name."""
    names = list(ROOT_MODULES)
    for package in LIBRARIES:
        names.append(package)
        path = importlib.import_module(package).__path__
        names += [m.name for m in pkgutil.walk_packages(path, package + ".")]
    return names
