"""Per-gateway fairness: a rate and an in-flight share for each gateway.

The process bound (``limits.py``) keeps a replica within its memory; these keep one
gateway from taking all of it. Each authenticated gateway gets a token bucket of request
bytes per second (burst: one second's worth) and a share of the in-flight bytes. The
defaults come from ``HEADWATER_INGEST_GATEWAY_*``; the tokens file may override both per
gateway (``rate_bytes_per_second``, ``max_inflight_bytes``; 0 turns a limit off).

Checks and commits are separate (``check`` raises, ``take`` books) so a call refused by a
later check (the process bound) costs the gateway none of its rate.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from headwater.ingest.admission.auth import ANONYMOUS, Gateway
from headwater.ingest.errors import OverloadedError
from headwater.ingest.settings import IngestSettings

#: The variable that sets a limit, named in refusals so an operator knows what to change.
_var = IngestSettings.variable

#: Seconds of rate a gateway may send at once after being idle.
BURST_SECONDS = 1.0
#: Shortest RetryInfo delay a rate refusal sends: waking up sooner only meets a refusal.
MIN_RATE_RETRY_S = 0.05


@dataclass
class _Books:
    """One gateway's token bucket and in-flight bytes."""

    tokens: float
    updated: float
    inflight: int = 0


class GatewayQuotas:
    """The rate and in-flight share of every gateway, checked before a call is started.

    The anonymous identity (``HEADWATER_INGEST_ALLOW_UNAUTHENTICATED``) is every caller at
    once, so it gets no per-gateway limit: only the process bounds apply to it.
    """

    def __init__(
        self,
        rate_bytes_per_s: int,
        max_inflight_bytes: int,
        retry_delay_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._default_rate = rate_bytes_per_s
        self._default_inflight = max_inflight_bytes
        self._retry_delay_s = retry_delay_s
        self._clock = clock
        # Keyed by gateway id: bounded by the tokens file, since only known gateways get here.
        self._books: dict[str, _Books] = {}

    def limits_of(self, gateway: Gateway) -> tuple[int, int]:
        """Return (rate bytes/s, in-flight bytes) for ``gateway``; 0 means no limit."""
        rate = gateway.rate_bytes_per_second
        inflight = gateway.max_inflight_bytes
        return (
            self._default_rate if rate is None else rate,
            self._default_inflight if inflight is None else inflight,
        )

    def _books_of(self, gateway: Gateway, rate: int) -> _Books:
        books = self._books.get(gateway.gateway_id)
        now = self._clock()
        if books is None:
            books = self._books[gateway.gateway_id] = _Books(rate * BURST_SECONDS, now)
        elif rate:
            books.tokens = min(rate * BURST_SECONDS, books.tokens + (now - books.updated) * rate)
        books.updated = now
        return books

    def check(self, gateway: Gateway, nbytes: int) -> None:
        """Raise OverloadedError if ``gateway`` may not start a call of ``nbytes`` now."""
        if gateway is ANONYMOUS:
            return
        rate, max_inflight = self.limits_of(gateway)
        books = self._books_of(gateway, rate)
        subject = f"gateway:{gateway.gateway_id}"
        # A gateway holding nothing is always let through (to the process bound), so one
        # request of any allowed size passes even when it is larger than the share.
        if max_inflight and books.inflight and books.inflight + nbytes > max_inflight:
            raise OverloadedError(
                f"gateway {gateway.gateway_id!r} has {books.inflight} request bytes in flight; "
                f"its share is {max_inflight} (max_inflight_bytes in the tokens file, default "
                f"{_var('gateway_max_inflight_bytes')}); wait for answers or retry later",
                retry_delay_s=self._retry_delay_s,
                limit="gateway_max_inflight_bytes",
                setting=_var("gateway_max_inflight_bytes"),
                limit_value=max_inflight,
                subject=subject,
            )
        # Tokens may go negative (a large request borrows from the next second); a call is
        # refused only while the bucket is in debt, which keeps the average at the rate.
        if rate and books.tokens <= 0:
            wait_s = max(MIN_RATE_RETRY_S, -books.tokens / rate)
            raise OverloadedError(
                f"gateway {gateway.gateway_id!r} is over its rate of {rate} request bytes per "
                "second (rate_bytes_per_second in the tokens file, default "
                f"{_var('gateway_rate_bytes_per_second')}); retry after {wait_s:.2f}s",
                retry_delay_s=wait_s,
                limit="gateway_rate_bytes_per_second",
                setting=_var("gateway_rate_bytes_per_second"),
                limit_value=rate,
                subject=subject,
            )

    def take(self, gateway: Gateway, nbytes: int) -> None:
        """Book a call of ``nbytes`` that passed :meth:`check` (rate and in-flight)."""
        if gateway is ANONYMOUS:
            return
        rate, _ = self.limits_of(gateway)
        books = self._books_of(gateway, rate)
        if rate:
            books.tokens -= nbytes
        books.inflight += nbytes

    def give(self, gateway: Gateway, nbytes: int) -> None:
        """Return the in-flight bytes of a call booked by :meth:`take`."""
        if gateway is ANONYMOUS:
            return
        books = self._books.get(gateway.gateway_id)
        if books is not None:
            books.inflight -= nbytes

    def inflight_by_gateway(self) -> dict[str, int]:
        """In-flight request bytes of every gateway seen since start (for the metrics)."""
        return {gw: b.inflight for gw, b in self._books.items()}
