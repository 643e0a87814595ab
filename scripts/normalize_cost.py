"""Time ``normalize_message`` per message for each fleet format (no Spark, no Kafka).

The hot path of the normalize step is ``normalize_message`` once per message inside
``mapInArrow``; this measures exactly that, on the payloads ``make run``'s fleet sends.

Usage: python scripts/normalize_cost.py [--messages N] [--repeat R]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from headwater.enricher.hop.normalize import normalize_message
from headwater_dev.devstack import vendors


def payloads(n: int) -> list[tuple[str, bytes]]:
    """Return ``n`` (content type, payload) pairs of the fleet's telemetry formats."""
    rng = random.Random(7)
    formats = vendors.TELEMETRY_FORMATS
    return [
        (ct, vendors.telemetry_payload(ct, vendors.random_reading(rng)))
        for ct in (formats[i % len(formats)] for i in range(n))
    ]


def main() -> None:
    """Print microseconds per message: the best of ``--repeat`` runs (least disturbed)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=30_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    msgs = payloads(args.messages)
    for ct, p in msgs[:10]:
        assert "error_reason" not in normalize_message(ct, p), normalize_message(ct, p)
    by_format: dict[str, list[float]] = {}
    for ct in dict.fromkeys(ct for ct, _ in msgs):
        subset = [(c, p) for c, p in msgs if c == ct]
        runs = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            for c, p in subset:
                normalize_message(c, p)
            runs.append((time.perf_counter() - t0) / len(subset) * 1e6)
        by_format[ct] = runs
        print(f"{ct:50s} {min(runs):7.2f} us/msg")
    overall = statistics.mean(min(r) for r in by_format.values())
    print(f"{'mean of formats':50s} {overall:7.2f} us/msg")


if __name__ == "__main__":
    main()
