"""Stop signals owned by the process: SIGINT and SIGTERM start its stop path, whatever it inherited.

A command started in the background (``nohup cmd &``, many CI runners and scripts) inherits
SIGINT *ignored*, and Python then never turns Ctrl-C into ``KeyboardInterrupt``; a parent
may also leave the signals blocked. A long-running command therefore installs its own
handlers with one of these, each taking SIGINT and SIGTERM alike:

- :func:`stop_event` for a loop that checks a flag between steps (it may wait on it);
- :func:`async_stop_event` for an asyncio service that awaits its stop;
- :func:`interrupt_on_stop` for code whose stop path is Ctrl-C's ``KeyboardInterrupt``
  (``asyncio.run`` then cancels its main task, so ``finally`` blocks run).

:func:`sigint_kept` keeps the handler through library code that takes SIGINT for itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import Iterator

#: What stops a long-running command: Ctrl-C, and what ``kill``, Kubernetes and systemd send.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _unblock() -> None:
    """Deliver the stop signals even if the parent left them blocked (the mask is inherited)."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def stop_event() -> threading.Event:
    """Return a flag that SIGINT or SIGTERM sets (call from the main thread)."""
    stop = threading.Event()
    for sig in STOP_SIGNALS:
        signal.signal(sig, lambda _signum, _frame: stop.set())
    _unblock()
    return stop


def async_stop_event() -> asyncio.Event:
    """Return an event the running loop sets on SIGINT or SIGTERM (call inside the loop)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stop.set)
    _unblock()
    return stop


def interrupt_on_stop() -> None:
    """Make SIGINT and SIGTERM raise ``KeyboardInterrupt``, as Ctrl-C does in a terminal."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.default_int_handler)
    _unblock()


@contextlib.contextmanager
def sigint_kept() -> Iterator[None]:
    """Put back this process's SIGINT handler after the block (pyspark's SparkContext takes it).

    pyspark's handler cancels every job and raises ``KeyboardInterrupt`` wherever the main
    thread is, in the middle of a call to the JVM: no way to stop a query gracefully.
    """
    previous = signal.getsignal(signal.SIGINT)
    try:
        yield
    finally:
        if previous is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, previous)
