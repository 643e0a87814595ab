"""Call and stream slots: how many a replica serves at once, and how many one gateway may hold.

Publish calls and open streams are counted apart (a stream is held for hours), per process
(``HEADWATER_INGEST_MAX_CONCURRENT_RPCS``, ``HEADWATER_INGEST_MAX_STREAMS``) and per gateway
(``HEADWATER_INGEST_GATEWAY_MAX_CONCURRENT_RPCS``, ``HEADWATER_INGEST_GATEWAY_MAX_STREAMS``,
overridden by ``max_concurrent_rpcs`` / ``max_streams`` in the tokens file), so one gateway
that opens every stream it can, or calls that never send a body, cannot take every slot of
a replica. A slot is held by a ``with`` block, so every way out of a call gives it back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from headwater.ingest.auth import ANONYMOUS, Gateway
from headwater.ingest.errors import OverloadedError
from headwater.ingest.settings import IngestSettings


class Slots:
    """The slots of one process; refusals are OverloadedError with the retry delay."""

    def __init__(self, settings: IngestSettings, retry_delay_s: float) -> None:
        self._retry_delay_s = retry_delay_s
        self.rpcs = 0
        self.streams = 0
        self._max_rpcs = settings.max_concurrent_rpcs
        self._max_streams = settings.max_streams
        self._gateway_rpcs_default = settings.gateway_max_concurrent_rpcs
        self._gateway_streams_default = settings.gateway_max_streams
        #: Slots held per gateway id (only gateways holding one: entries leave at zero).
        self.rpcs_by_gateway: dict[str, int] = {}
        self.streams_by_gateway: dict[str, int] = {}

    @contextmanager
    def rpc_slot(self, gateway: Gateway) -> Iterator[None]:
        """Hold a publish-call slot of the process and of ``gateway`` for the block.

        Raises:
            OverloadedError: the process's or the gateway's limit is reached.
        """
        if self.rpcs >= self._max_rpcs:
            raise OverloadedError(
                f"ingest replica is serving its limit of {self._max_rpcs} calls at once "
                "(HEADWATER_INGEST_MAX_CONCURRENT_RPCS); retry later or on another replica",
                retry_delay_s=self._retry_delay_s,
                limit="max_concurrent_rpcs",
                setting="HEADWATER_INGEST_MAX_CONCURRENT_RPCS",
                limit_value=self._max_rpcs,
            )
        limit = _own(gateway.max_concurrent_rpcs, self._gateway_rpcs_default, gateway)
        with _held(self.rpcs_by_gateway, gateway, limit, self._gateway_rpcs_full):
            self.rpcs += 1
            try:
                yield
            finally:
                self.rpcs -= 1

    @contextmanager
    def stream_slot(self, gateway: Gateway) -> Iterator[None]:
        """Hold a stream slot of the process and of ``gateway`` for the block.

        Raises:
            OverloadedError: the process's or the gateway's limit is reached.
        """
        if self.streams >= self._max_streams:
            raise OverloadedError(
                f"ingest replica holds its limit of {self._max_streams} open streams "
                "(HEADWATER_INGEST_MAX_STREAMS); retry later or on another replica",
                retry_delay_s=self._retry_delay_s,
                limit="max_streams",
                setting="HEADWATER_INGEST_MAX_STREAMS",
                limit_value=self._max_streams,
            )
        limit = _own(gateway.max_streams, self._gateway_streams_default, gateway)
        with _held(self.streams_by_gateway, gateway, limit, self._gateway_streams_full):
            self.streams += 1
            try:
                yield
            finally:
                self.streams -= 1

    def _gateway_rpcs_full(self, gateway: Gateway, limit: int) -> OverloadedError:
        return OverloadedError(
            f"gateway {gateway.gateway_id!r} has its limit of {limit} publish calls at once "
            "(max_concurrent_rpcs in the tokens file, default "
            "HEADWATER_INGEST_GATEWAY_MAX_CONCURRENT_RPCS); wait for answers or retry later",
            retry_delay_s=self._retry_delay_s,
            limit="gateway_max_concurrent_rpcs",
            setting="HEADWATER_INGEST_GATEWAY_MAX_CONCURRENT_RPCS",
            limit_value=limit,
            subject=f"gateway:{gateway.gateway_id}",
        )

    def _gateway_streams_full(self, gateway: Gateway, limit: int) -> OverloadedError:
        return OverloadedError(
            f"gateway {gateway.gateway_id!r} holds its limit of {limit} open streams "
            "(max_streams in the tokens file, default HEADWATER_INGEST_GATEWAY_MAX_STREAMS); "
            "close a stream or retry later",
            retry_delay_s=self._retry_delay_s,
            limit="gateway_max_streams",
            setting="HEADWATER_INGEST_GATEWAY_MAX_STREAMS",
            limit_value=limit,
            subject=f"gateway:{gateway.gateway_id}",
        )


def _own(override: int | None, default: int, gateway: Gateway) -> int:
    """A gateway's slot limit: its tokens-file override, else the default; 0: none.

    The anonymous identity is every caller at once: only the process limits apply to it.
    """
    if gateway is ANONYMOUS:
        return 0
    return default if override is None else override


@contextmanager
def _held(
    counts: dict[str, int],
    gateway: Gateway,
    limit: int,
    full: Callable[[Gateway, int], OverloadedError],
) -> Iterator[None]:
    """Count one slot of ``gateway`` in ``counts`` for the block, or raise ``full``."""
    key = gateway.gateway_id
    held = counts.get(key, 0)
    if limit and held >= limit:
        raise full(gateway, limit)
    counts[key] = held + 1
    try:
        yield
    finally:
        left = counts[key] - 1
        if left:
            counts[key] = left
        else:
            del counts[key]
