"""Whether a Kubernetes target is production, which ``headwater chaos`` refuses by default.

The convention (docs/operations.md, "Chaos"): a namespace is production when one of
PRODUCTION_LABELS says ``production`` or ``prod`` (``headwater.dev/environment`` is ours; the
common ``environment`` and ``env`` are honoured too, so a cluster's existing labels count).
Contexts have no labels: a kube context is production when its name, or its cluster's, has
``prod`` or ``production`` as a word (``prod``, ``eu-prod-1``, ``gke_acme_production``). A
namespace whose labels cannot be read is refused as well: nobody could tell.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

#: Namespace labels that name an environment, ours first.
PRODUCTION_LABELS = ("headwater.dev/environment", "environment", "env")
PRODUCTION_VALUES = frozenset({"production", "prod"})
#: The flag that lets chaos act on production anyway.
OVERRIDE_FLAG = "--i-know-this-is-production"


def production_refusal(
    context: str, cluster: str, namespace: str, labels: Mapping[str, str] | None
) -> str | None:
    """Why acting on ``namespace`` through ``context`` is refused, or None when it is not.

    ``labels`` are the namespace's, None when they could not be read.
    """
    for what, name in (("kube context", context), ("cluster", cluster)):
        if PRODUCTION_VALUES & set(re.split(r"[^a-z0-9]+", name.lower())):
            return f"the {what} {name!r} is named as production"
    if labels is None:
        return f"cannot read the labels of namespace {namespace!r}: it may be production"
    for key in PRODUCTION_LABELS:
        if labels.get(key, "").strip().lower() in PRODUCTION_VALUES:
            return f"namespace {namespace!r} is labelled {key}={labels[key]}"
    return None


def refusal_line(reason: str) -> str:
    """The one line printed when chaos refuses a production target."""
    return f"refused: {reason}; chaos is for dev and staging ({OVERRIDE_FLAG} to act anyway)"
