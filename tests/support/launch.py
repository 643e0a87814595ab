"""The one way tests start a long-running process: its own process group, always reaped.

``launch`` starts a command in a session of its own (its own process group, no terminal,
stdin from /dev/null unless given), so a signal or a kill reaches everything it started;
``stop`` signals it, waits, kills its whole group if it outlives the wait, and reaps it;
``launched`` does both around a ``with`` block, whatever the block raised.
``ignore_sigint=True`` launches it as ``nohup cmd &`` and many CI runners do: SIGINT ignored,
inherited from the parent (the command must install its own handler to stop on Ctrl-C).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator, Sequence
from typing import Any

#: How long ``stop`` waits after the group was killed: a kill is never ignored.
KILLED_WITHIN_S = 30.0


def launch(
    cmd: Sequence[str], *, ignore_sigint: bool = False, **popen: Any
) -> subprocess.Popen[Any]:
    """Start ``cmd`` in a process group of its own (keyword arguments go to ``Popen``)."""
    popen.setdefault("stdin", subprocess.DEVNULL)
    inherited = _sigint_ignored() if ignore_sigint else contextlib.nullcontext()
    with inherited:
        return subprocess.Popen(list(cmd), start_new_session=True, **popen)


@contextlib.contextmanager
def _sigint_ignored() -> Iterator[None]:
    """Ignore SIGINT here while the child starts: it inherits the disposition through exec."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def kill_group(proc: subprocess.Popen[Any]) -> None:
    """SIGKILL every process still in ``proc``'s group (its own, from ``launch``)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def stop(
    proc: subprocess.Popen[Any], sig: int = signal.SIGTERM, within_s: float = 30.0
) -> int | None:
    """Send ``sig`` (if it runs), wait ``within_s``, then kill its group; always reaped.

    Returns:
        its exit code if it ended by itself within ``within_s`` of the signal, else None.
    """
    code = proc.poll()
    if code is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            code = proc.wait(within_s)
    kill_group(proc)  # what it started and left behind goes too
    proc.wait(KILLED_WITHIN_S)
    return code


@contextlib.contextmanager
def launched(
    cmd: Sequence[str],
    *,
    stop_signal: int = signal.SIGTERM,
    stop_within_s: float = 30.0,
    **launch_args: Any,
) -> Iterator[subprocess.Popen[Any]]:
    """``launch`` for the block; at its end ``stop`` with ``stop_signal``, whatever happened."""
    proc = launch(cmd, **launch_args)
    try:
        yield proc
    finally:
        stop(proc, stop_signal, stop_within_s)
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
