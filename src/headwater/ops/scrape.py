"""Prometheus scrape arithmetic: the enricher's consumer signals, computed like PromQL.

``rate()`` and ``histogram_quantile()`` over text-format scrapes (not Unix signals). The
enricher exports no precomputed rates or quantiles; ``headwater lag --metrics-url`` scrapes
the counter and histograms and computes them here. Between two scrapes of the same endpoint
(``--watch``), the signals cover that interval, like ``rate()`` and ``histogram_quantile()``
over it; on a single scrape the quantiles cover every sample since the enricher started and
the byte rate is not known yet (left out).
"""

from __future__ import annotations

import math
import re
import time
import urllib.request
from dataclasses import dataclass, field

#: The signals -> the Prometheus series they come from (counter, or histogram for ``_p99_s``).
SIGNALS = {
    "bytes_out_per_s": "headwater_enricher_output_bytes_total",
    "producer_to_consumer_p99_s": "headwater_enricher_producer_to_consumer_duration_seconds",
    "consumer_to_processing_p99_s": "headwater_enricher_consumer_to_processing_duration_seconds",
}


#: One sample line: name, optional {labels}, value (a timestamp may follow).
_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LE = re.compile(r'(?:^|,)\s*le="([^"]*)"')


@dataclass
class Scrape:
    """The series of one scrape that the signals need, summed over their other labels."""

    at: float
    counters: dict[str, float] = field(default_factory=dict)
    #: histogram name -> {upper bound: cumulative count}
    buckets: dict[str, dict[float, float]] = field(default_factory=dict)


def parse(text: str, at: float) -> Scrape:
    """Return the counters and histogram buckets of a Prometheus text exposition.

    A small reader of the text format (no client library, so ``headwater[ops]`` needs none):
    only the series of :data:`SIGNALS` are kept, summed over their other labels.
    """
    scrape = Scrape(at)
    histograms = {m for s, m in SIGNALS.items() if s.endswith("_p99_s")}
    counters = set(SIGNALS.values()) - histograms
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match is None:
            continue
        name, labels, raw = match.groups()
        try:
            value = float(raw)
        except ValueError:
            continue
        if name in counters:
            scrape.counters[name] = scrape.counters.get(name, 0.0) + value
        elif name.endswith("_bucket") and name.removesuffix("_bucket") in histograms:
            le = _LE.search(labels or "")
            if le is None:
                continue
            by_le = scrape.buckets.setdefault(name.removesuffix("_bucket"), {})
            bound = float(le.group(1))
            by_le[bound] = by_le.get(bound, 0.0) + value
    return scrape


def histogram_quantile(q: float, buckets: dict[float, float]) -> float | None:
    """Return the ``q`` quantile of cumulative ``buckets`` as PromQL estimates it.

    Linear interpolation inside the bucket that holds the rank; a rank in the ``+Inf``
    bucket gives the highest finite bound. None when the histogram holds no sample.
    """
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] <= 0:
        return None
    rank = q * buckets[bounds[-1]]
    lower, below = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if math.isinf(bound):
                return lower
            if count == below:
                return bound
            return lower + (bound - lower) * (rank - below) / (count - below)
        lower, below = bound, count
    return lower


def _delta(now: dict[float, float], before: dict[float, float]) -> dict[float, float]:
    return {le: n - before.get(le, 0.0) for le, n in now.items()}


def signals(now: Scrape, before: Scrape | None) -> dict[str, float]:
    """Return the signals from one scrape, over the interval since ``before`` if given."""
    found: dict[str, float] = {}
    for signal, series in SIGNALS.items():
        if signal.endswith("_p99_s"):
            buckets = now.buckets.get(series, {})
            if before is not None:
                window = _delta(buckets, before.buckets.get(series, {}))
                if window and max(window.values()) > 0:  # new samples: this interval only
                    buckets = window
            value = histogram_quantile(0.99, buckets)
            if value is not None:
                found[signal] = value
        elif before is not None and series in now.counters and now.at > before.at:
            increase = now.counters[series] - before.counters.get(series, 0.0)
            if increase >= 0:  # a restart resets counters: no rate for that interval
                found[signal] = increase / (now.at - before.at)
    return found


#: The last scrape per endpoint, so a ``--watch`` loop gets rates over its interval.
_last: dict[str, Scrape] = {}


def scrape_signals(metrics_url: str, timeout_s: float = 5.0) -> dict[str, float]:
    """Read the consumer signals from a Prometheus text endpoint (missing ones are skipped)."""
    with urllib.request.urlopen(metrics_url, timeout=timeout_s) as response:
        text = response.read().decode()
    now = parse(text, time.monotonic())
    found = signals(now, _last.get(metrics_url))
    _last[metrics_url] = now
    return found
