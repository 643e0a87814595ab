"""Call and stream slots: how many a replica serves at once, and how many one gateway may hold.

Publish calls and open streams are counted apart (a stream is held for hours), per process
(``HEADWATER_INGEST_MAX_CONCURRENT_RPCS``, ``HEADWATER_INGEST_MAX_STREAMS``) and per gateway
(``HEADWATER_INGEST_GATEWAY_MAX_CONCURRENT_RPCS``, ``HEADWATER_INGEST_GATEWAY_MAX_STREAMS``,
overridden by ``max_concurrent_rpcs`` / ``max_streams`` in the tokens file), so one gateway
that opens every stream it can, or calls that never send a body, cannot take every slot of
a replica. A slot is held by a ``with`` block, so every way out of a call gives it back.
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType

from headwater.ingest.admission.auth import ANONYMOUS, Gateway
from headwater.ingest.errors import OverloadedError
from headwater.ingest.settings import IngestSettings

#: The variable that sets a limit, named in refusals so an operator knows what to change.
_var = IngestSettings.variable


class Pool:
    """One kind of slot: a process count and limit, and each gateway's count.

    ``process_full`` and ``gateway_full`` build the refusals from the limit reached; a
    gateway's limit is its tokens-file override (``override``), else ``gateway_default``;
    0 means none.
    """

    def __init__(
        self,
        limit: int,
        gateway_default: int,
        override: Callable[[Gateway], int | None],
        process_full: Callable[[int], OverloadedError],
        gateway_full: Callable[[Gateway, int], OverloadedError],
    ) -> None:
        #: Slots held, and per gateway id (only gateways holding one: entries leave at zero).
        self.held = 0
        self.by_gateway: dict[str, int] = {}
        self._limit = limit
        self._gateway_default = gateway_default
        self._override = override
        self._process_full = process_full
        self._gateway_full = gateway_full

    def take(self, gateway: Gateway) -> str:
        """Count one slot of ``gateway`` or raise OverloadedError; return its key."""
        if self.held >= self._limit:
            raise self._process_full(self._limit)
        key = gateway.gateway_id
        held = self.by_gateway.get(key, 0)
        limit = _own(self._override(gateway), self._gateway_default, gateway)
        if limit and held >= limit:
            raise self._gateway_full(gateway, limit)
        self.by_gateway[key] = held + 1
        self.held += 1
        return key

    def give(self, key: str) -> None:
        """Give back one slot taken by :meth:`take`."""
        self.held -= 1
        left = self.by_gateway[key] - 1
        if left:
            self.by_gateway[key] = left
        else:
            del self.by_gateway[key]


class Slot:
    """A slot of a pool, taken on entering a ``with`` block and given back on leaving it.

    A class rather than a ``@contextmanager`` generator: it is entered on every call, and
    the generator's machinery cost more than the counting (docs/benchmarks.md, issue 23).
    """

    __slots__ = ("_gateway", "_key", "_pool")

    def __init__(self, pool: Pool, gateway: Gateway) -> None:
        self._pool = pool
        self._gateway = gateway
        self._key: str | None = None

    def __enter__(self) -> None:
        self._key = self._pool.take(self._gateway)

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _value: BaseException | None,
        _traceback: TracebackType | None,
    ) -> None:
        if self._key is not None:
            self._pool.give(self._key)
            self._key = None


class Slots:
    """The slots of one process; refusals are OverloadedError with the retry delay."""

    def __init__(self, settings: IngestSettings, retry_delay_s: float) -> None:
        self._retry_delay_s = retry_delay_s
        #: Publish calls being served.
        self.calls = Pool(
            settings.max_concurrent_rpcs,
            settings.gateway_max_concurrent_rpcs,
            lambda gateway: gateway.max_concurrent_rpcs,
            self._calls_full,
            self._gateway_calls_full,
        )
        #: Open streams.
        self.streams = Pool(
            settings.max_streams,
            settings.gateway_max_streams,
            lambda gateway: gateway.max_streams,
            self._streams_full,
            self._gateway_streams_full,
        )

    def _calls_full(self, limit: int) -> OverloadedError:
        return OverloadedError(
            f"ingest replica is serving its limit of {limit} calls at once "
            f"({_var('max_concurrent_rpcs')}); retry later or on another replica",
            retry_delay_s=self._retry_delay_s,
            limit="max_concurrent_rpcs",
            setting=_var("max_concurrent_rpcs"),
            limit_value=limit,
        )

    def _streams_full(self, limit: int) -> OverloadedError:
        return OverloadedError(
            f"ingest replica holds its limit of {limit} open streams "
            f"({_var('max_streams')}); retry later or on another replica",
            retry_delay_s=self._retry_delay_s,
            limit="max_streams",
            setting=_var("max_streams"),
            limit_value=limit,
        )

    def _gateway_calls_full(self, gateway: Gateway, limit: int) -> OverloadedError:
        return OverloadedError(
            f"gateway {gateway.gateway_id!r} has its limit of {limit} publish calls at once "
            "(max_concurrent_rpcs in the tokens file, default "
            f"{_var('gateway_max_concurrent_rpcs')}); wait for answers or retry later",
            retry_delay_s=self._retry_delay_s,
            limit="gateway_max_concurrent_rpcs",
            setting=_var("gateway_max_concurrent_rpcs"),
            limit_value=limit,
            subject=f"gateway:{gateway.gateway_id}",
        )

    def _gateway_streams_full(self, gateway: Gateway, limit: int) -> OverloadedError:
        return OverloadedError(
            f"gateway {gateway.gateway_id!r} holds its limit of {limit} open streams "
            f"(max_streams in the tokens file, default {_var('gateway_max_streams')}); "
            "close a stream or retry later",
            retry_delay_s=self._retry_delay_s,
            limit="gateway_max_streams",
            setting=_var("gateway_max_streams"),
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
