"""Apply the ingest service's answers to the spool, message by message, and report them.

OK -> deleted; retriable -> kept with a delay (the server's RetryInfo or backoff with
jitter); permanent -> moved to the rejected table. Each answer is written in one worker
thread hop, and outcomes go to the metrics (one add per status) and the caller's callback.
What an answer says about the server as a whole (pushback, frames too big) is handed back
to the sender, which owns that state.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from headwater.gateway.answers import DeliveryReport, Verdict, judge, match
from headwater.gateway.config import GatewayConfig
from headwater.gateway.errors import CallFailedError
from headwater.gateway.metrics import GatewayMetrics
from headwater.gateway.records import DueMessage
from headwater.gateway.spool import Spool
from headwater.proto.ingest.v1 import ingest_messages_pb2 as api

#: Per-message codes whose RetryInfo delay pauses the whole endpoint.
PUSHBACK_CODES = frozenset({"RESOURCE_EXHAUSTED", "UNAVAILABLE"})


@dataclass(frozen=True)
class Settled:
    """What one answer says about the server, beyond its messages."""

    #: Pushback: send nothing more on this endpoint for this long (0: none).
    pause_s: float = 0.0
    #: The server refused the frame's message count (BATCH_SIZE_OUT_OF_RANGE).
    frame_too_big: bool = False


class SpoolKeeper:
    """Keeps one endpoint's spool in step with the answers it gets."""

    def __init__(
        self,
        endpoint: str,
        spool: Spool,
        config: GatewayConfig,
        metrics: GatewayMetrics,
        on_outcome: Callable[[DeliveryReport], None] | None,
    ) -> None:
        self.endpoint = endpoint
        self.spool = spool
        self.config = config
        self._metrics = metrics
        self._on_outcome = on_outcome

    def backoff(self, attempt: int) -> float:
        """Exponential backoff with full jitter: a random delay up to the attempt's cap."""
        cfg = self.config
        cap = min(cfg.backoff_max_s, cfg.backoff_initial_s * 2 ** min(attempt, 20))
        return random.uniform(0, cap)

    async def keep(self, rows: list[DueMessage], failure: CallFailedError) -> None:
        """Messages of a failed call stay spooled, one attempt more."""
        await asyncio.to_thread(
            self.spool.retry_later, [r.seq for r in rows], failure.retry_delay_s
        )
        code, reason = failure.code.name, failure.reason
        self._report(
            [DeliveryReport(r.message_id, self.endpoint, "retry", code, reason) for r in rows]
        )

    async def settle(self, rows: list[DueMessage], results: list[api.MessageResult]) -> Settled:
        """Apply one answer: delete the OKs, keep the retriable, reject the rest."""
        ep = self.endpoint
        delivered: list[int] = []
        delivered_bytes = 0
        later: dict[float, list[int]] = {}
        rejected: list[tuple[int, str, str, str]] = []
        outcomes: list[DeliveryReport] = []
        backoff: dict[int, float] = {}  # one draw per attempt count: one write per frame
        pause, too_big = 0.0, False
        for row, result in zip(rows, match([r.message_id for r in rows], results), strict=True):
            if result is not None and result.code == 0:  # the usual case, kept cheap
                delivered.append(row.seq)
                delivered_bytes += len(row.envelope)
                outcomes.append(
                    DeliveryReport(
                        row.message_id, ep, "delivered", "OK", "", result.partition, result.offset
                    )
                )
                continue
            verdict = (
                judge(result) if result is not None else Verdict("retry", "UNKNOWN", "NO_RESULT")
            )
            if verdict.status == "rejected":
                rejected.append((row.seq, verdict.code, verdict.reason, verdict.detail))
            else:
                too_big = too_big or verdict.reason == "BATCH_SIZE_OUT_OF_RANGE"
                if verdict.code in PUSHBACK_CODES:
                    pause = max(pause, verdict.retry_delay_s)
                if row.attempts not in backoff:
                    backoff[row.attempts] = self.backoff(row.attempts)
                delay = max(verdict.retry_delay_s, backoff[row.attempts])
                later.setdefault(delay, []).append(row.seq)
            outcomes.append(
                DeliveryReport(row.message_id, ep, verdict.status, verdict.code, verdict.reason)
            )
        await asyncio.to_thread(self._apply, delivered, later, rejected)
        self._metrics.delivered_bytes(ep, delivered_bytes)
        self._report(outcomes)
        return Settled(pause, too_big)

    def _apply(
        self,
        delivered: list[int],
        later: dict[float, list[int]],
        rejected: list[tuple[int, str, str, str]],
    ) -> None:
        """Write one answer's verdicts to the spool (in a worker thread)."""
        self.spool.delivered(delivered)
        for delay, seqs in later.items():
            self.spool.retry_later(seqs, delay)
        for seq, code, reason, detail in rejected:
            self.spool.reject(seq, code, reason, detail)

    def _report(self, outcomes: list[DeliveryReport]) -> None:
        for status, n in Counter(o.status for o in outcomes).items():
            self._metrics.message(self.endpoint, status, n)
        if self._on_outcome is not None:
            for outcome in outcomes:
                self._on_outcome(outcome)
