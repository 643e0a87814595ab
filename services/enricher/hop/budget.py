"""Bounded work per message: a CPU-time budget and a size budget around every normalizer call.

The CPU-time budget is one per message, for every step of the Python hop: decoding its
record, normalizing it and converting its units (``each``'s ``spent`` carries what decoding
used into normalizing).

One message must never hold back the others: a normalizer (built-in or a plugin) that
spins on a hostile payload would stall its Python worker, its micro-batch, and so every
tenant. So each call runs under a CPU-time budget, enforced by an interval timer
(``ITIMER_PROF``) whose signal raises :class:`CpuBudgetExceeded` in the worker's main thread,
and every message's input and output are held to a size budget. Over either, the message
is a dead letter of its own reason and the batch goes on.

What the timer cannot do: interrupt C code (a regex, ``json`` decoding, protobuf parsing)
before it returns. That is why the inputs reaching C code are bounded first (payload size
here, the unit grammar in ``units.py``, the charsets in ``formats/base.py``). Off the main
thread (signals are delivered there only) the budget is a measured check after the call.
"""

from __future__ import annotations

import gc
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from headwater.enricher.errors import EnricherError
from headwater.runtime.settings import Renamed, Settings, setting

#: A normalizer used more CPU time than the budget allows.
CPU_REASON = "NORMALIZE_BUDGET"
#: The payload, or what a normalizer made of it, is larger than the size budget allows.
SIZE_REASON = "NORMALIZE_TOO_LARGE"
#: A Sparkplug B payload with more metrics, or a longer metric name, than its caps allow.
SPARKPLUG_REASON = "SPARKPLUG_LIMIT"
#: Every budget reason (the metric ``normalize.budget_exceeded`` counts them).
REASONS = frozenset({CPU_REASON, SIZE_REASON, SPARKPLUG_REASON})
#: How often, in the process's CPU seconds, the armed timer checks the running message.
#: The timer is armed once per run of ``each``, not per message, so a message's deadline
#: falls anywhere between two ticks: with ticks one budget apart, a message could run to
#: twice its budget before the next one came. 10 ms ticks bound the overrun to ~10 ms for
#: ~100 signals (one attribute check each) per CPU second of the hop.
TICK_S = 0.01


@dataclass(frozen=True)
class Budget(Settings):
    """What one message may cost the normalize step (``HEADWATER_ENRICHER_NORMALIZE_*``)."""

    env_prefix: ClassVar[str] = "HEADWATER_ENRICHER_"

    cpu_seconds: float = setting(
        0.1,
        minimum=0.001,
        unit="s",
        env="NORMALIZE_CPU_SECONDS",
        help="CPU time one normalizer call may use (its thread's, not the wall clock; at least "
        "0.001); over it the message is `NORMALIZE_BUDGET`. See "
        "[Bounded work per message](#bounded-work-per-message)",
        renamed=(Renamed("HEADWATER_ENRICHER_NORMALIZE_CPU_MS", scale=0.001),),
    )
    max_payload_bytes: int = setting(
        262_144,
        minimum=1,
        env="NORMALIZE_MAX_PAYLOAD_BYTES",
        help="payload bytes a normalizer is given at all (the ingest contract's limit); larger "
        "is `NORMALIZE_TOO_LARGE`",
    )
    max_measurements: int = setting(
        10_000,
        minimum=1,
        env="NORMALIZE_MAX_MEASUREMENTS",
        help="measurements, metric definitions and pending readings one message may produce "
        "together; more is `NORMALIZE_TOO_LARGE`",
    )
    max_text_chars: int = setting(
        1_024,
        minimum=1,
        env="NORMALIZE_MAX_TEXT_CHARS",
        help="characters of any one string a normalizer returns (names, units, alarm code and "
        "text); longer is `NORMALIZE_TOO_LARGE`",
    )
    #: A birth of a large node has a few thousand.
    sparkplug_max_metrics: int = setting(
        5_000, minimum=1, help="metrics in one Sparkplug B payload; more is `SPARKPLUG_LIMIT`"
    )
    sparkplug_max_name_chars: int = setting(
        256,
        minimum=1,
        help="characters of one Sparkplug B metric name; longer is `SPARKPLUG_LIMIT`",
    )


class BudgetExceeded(BaseException):
    """Over budget: a signal interrupting a normalizer, not an error (outside the error root).

    A BaseException, so that a normalizer's ``except Exception`` (pint's parser wrappers, a
    plugin's own guard) cannot swallow the interruption.
    """

    reason = CPU_REASON


class CpuBudgetExceeded(BudgetExceeded):
    """A normalizer call used more CPU time than ``Budget.cpu_seconds``."""


class SizeBudgetExceeded(EnricherError):
    """A payload or a normalized result larger than the size budget (raised by checks)."""

    reason = SIZE_REASON


_current: Budget | None = None


def current() -> Budget:
    """Return the budget of this process: set by :func:`configure`, else from the environment.

    Spark's Python workers are separate processes that inherit the executor's environment,
    so the environment is where they find it.
    """
    global _current
    if _current is None:
        _current = Budget.from_env()
    return _current


def configure(budget: Budget | None) -> None:
    """Set this process's budget (None: read the environment again on next use)."""
    global _current
    _current = budget


class _Timer:
    """The CPU-time interrupt: one per process, armed around each call in the main thread."""

    def __init__(self) -> None:
        self.armed = False
        self.deadline = 0.0  # thread CPU time (s) after which the handler raises
        self.installed: bool | None = None  # None: not tried yet; False: not possible here

    def install(self) -> bool:
        """Install the SIGPROF handler once; False when another handler owns the signal."""
        if self.installed is None:
            try:
                previous = signal.getsignal(signal.SIGPROF)
                if previous not in (signal.SIG_DFL, signal.SIG_IGN, None):
                    self.installed = False  # a profiler's: do not take it over
                else:
                    signal.signal(signal.SIGPROF, self._fire)
                    self.installed = True
            except (ValueError, AttributeError, OSError):  # not the main thread, no SIGPROF
                self.installed = False
        return self.installed

    def _fire(self, _signum: int, frame: Any) -> None:
        # ITIMER_PROF counts the whole process's CPU time; other threads (Spark's reader and
        # writer threads) may have used it, so raise only when this thread is over budget;
        # the timer's interval fires again otherwise.
        if self.armed and time.thread_time() >= self.deadline and not _in_gc_callback(frame):
            raise CpuBudgetExceeded()


def _in_gc_callback(frame: Any) -> bool:
    """Whether ``frame`` runs inside a ``gc.callbacks`` function (a library's, a profiler's).

    The collector swallows what its callbacks raise ("Exception ignored in ..."): the
    interruption would be lost, and the message would run on to the next tick anyway. So
    the handler leaves it to that tick, which comes outside the callback.
    """
    callbacks = {getattr(cb, "__code__", None) for cb in gc.callbacks}
    while frame is not None:
        if frame.f_code in callbacks:
            return True
        frame = frame.f_back
    return False


_timer = _Timer()
_MAIN = threading.main_thread()


def call(budget: Budget, fn: Any, *args: Any) -> Any:
    """Return ``fn(*args)``, run under ``budget.cpu_seconds`` of CPU time (:func:`each` of one).

    Raises:
        CpuBudgetExceeded: the call was interrupted (main thread), or took longer than the
            budget (measured, elsewhere or when the interruption was swallowed).
        Whatever ``fn`` raised.
    """
    (result,) = each(budget, _calls, [fn], *args)
    if isinstance(result, BaseException):
        raise result
    return result


def _calls(fns: Sequence[Any], *args: Any) -> Iterator[Any]:
    for fn in fns:
        yield fn(*args)


def each(
    budget: Budget,
    batch: Callable[..., Iterable[Any]],
    items: Sequence[Any],
    *args: Any,
    spent: Sequence[float] | None = None,
) -> list[Any]:
    """Return the results of ``batch(items, *args)``, each item under its own CPU budget.

    ``batch`` is a generator function yielding one result per item, in order (a batch
    normalizer over payloads of one media type; ``args``: its media type). The interrupt is
    armed once for the whole run, not once per item (two system calls less per message);
    each item's budget starts when the previous item's result came. An item whose
    production raises (over its budget: :class:`CpuBudgetExceeded`) gets the exception as
    its result, and a new generator starts at the next item; one that ends early leaves
    each missing result a RuntimeError. ``spent``: the CPU seconds each item already used of
    its budget in an earlier step (decoding its record), so one budget covers every step.
    """
    return each_with_cost(budget, batch, items, *args, spent=spent)[0]


def each_with_cost(
    budget: Budget,
    batch: Callable[..., Iterable[Any]],
    items: Sequence[Any],
    *args: Any,
    spent: Sequence[float] | None = None,
) -> tuple[list[Any], list[float]]:
    """Return :func:`each`'s results and the CPU seconds each item used in this step."""
    limit = budget.cpu_seconds
    count = len(items)
    out: list[Any] = []
    costs: list[float] = []
    # Per item: one clock read (its end is the next item's start), two flag writes, one
    # next(); names bound locally, as this loop runs once a message in each step of the hop.
    clock, timer = time.thread_time, _timer
    add_out, add_cost = out.append, costs.append
    timed = threading.current_thread() is _MAIN and timer.install()
    if timed:
        # The interval re-fires: a normalizer that swallows one interruption gets another.
        signal.setitimer(signal.ITIMER_PROF, min(limit, TICK_S), min(limit, TICK_S))
    try:
        while len(out) < count:
            start = clock()
            try:
                first = len(out)
                results: Iterator[Any] | None = None
                for i in range(first, count):
                    allowed = limit - spent[i] if spent else limit
                    timer.deadline = start + allowed
                    timer.armed = timed
                    if results is None:  # a generator: nothing runs before the first next()
                        results = iter(batch(items[first:] if first else items, *args))
                    result = next(results)
                    timer.armed = False  # first: a signal from here on is ignored
                    now = clock()
                    add_cost(now - start)
                    add_out(CpuBudgetExceeded() if now - start > allowed else result)
                    start = now
            except StopIteration:
                missing = count - len(out)
                out += [
                    RuntimeError("a batch normalizer gave fewer results than payloads")
                ] * missing
                costs += [0.0] * missing
            except (Exception, BudgetExceeded) as exc:
                timer.armed = False
                add_out(exc)
                add_cost(clock() - start)
    finally:
        timer.armed = False
        if timed:
            signal.setitimer(signal.ITIMER_PROF, 0.0)
    return out, costs
