"""What every phase shares: its load, and the figures of that load once it stopped."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from headwater_dev.bench.faults.isr import IsrWatch
from headwater_dev.bench.faults.load import SteadyLoad
from headwater_dev.bench.faults.options import FaultsOptions

#: The longest wait for the spool to empty once a phase stops spooling.
DRAIN_WITHIN_S = 120.0


@contextlib.contextmanager
def loaded(target: str, opts: FaultsOptions, folder: Path) -> Iterator[SteadyLoad]:
    """A steady load for the block (started, with a first OK); drained after it.

    Left by an exception (Ctrl-C included), the load stops at once without draining.
    """
    load = SteadyLoad(target, opts.rate, opts.payload, folder)
    try:
        yield load.start()
    except BaseException:
        load.stop(drain_within_s=0)
        raise
    load.stop(DRAIN_WITHIN_S)


def load_figures(load: SteadyLoad, isr: IsrWatch) -> dict[str, Any]:
    """The load's own figures: what was spooled and answered, and the in-sync check."""
    ledger = load.ledger
    return {
        "offered_per_s": round(load.offered_per_s()),
        "spooled": load.spooled,
        "oks": ledger.oks,
        "retried": dict(ledger.retried),
        "rejected": dict(ledger.rejected),
        "max_spool_depth": load.max_depth,
        "drained": load.drained,
        "oks_under_min_isr": isr.oks_under_min_isr(ledger),
        "fewest_in_sync": isr.fewest(load.started_at, load.stopped_at),
    }
