"""Progress of a long operator command, on stderr: stdout stays the command's result."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """Count what a command works through and report it every ``every`` steps.

    Reports go to stderr as one line each (``headwater dlq: read 50000 dead letters, 12
    selected, 4.1 s``), so output piped elsewhere stays clean. ``every`` 0 reports nothing.
    """

    def __init__(self, command: str, every: int, out: TextIO | None = None) -> None:
        self.command = command
        self.every = every
        self.out = out or sys.stderr
        self.started = time.monotonic()

    def report(self, done: int, what: str, detail: str = "") -> None:
        """Report ``done`` units of ``what`` when ``done`` is a multiple of ``every``."""
        if self.every and done and done % self.every == 0:
            self.say(done, what, detail)

    def say(self, done: int, what: str, detail: str = "") -> None:
        """Report ``done`` units of ``what`` now (the end of a phase, say)."""
        extra = f", {detail}" if detail else ""
        elapsed = time.monotonic() - self.started
        print(f"{self.command}: {what} {done}{extra}, {elapsed:.1f} s", file=self.out, flush=True)
