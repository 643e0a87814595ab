"""A progress display: one line rewritten in place on a terminal, a line per update otherwise.

On a terminal, a log or CI file would otherwise fill with hundreds of near-identical lines;
in a file or pipe, carriage returns would make one unreadable line, so each update gets
its own line there.
"""

from __future__ import annotations

import sys
from typing import TextIO

#: ANSI "erase to end of line": a shorter update must not leave the tail of a longer one.
_CLEAR_TO_EOL = "\x1b[K"


class ProgressLine:
    """Show the latest status on one line of ``stream`` (standard error by default)."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream if stream is not None else sys.stderr
        self._tty = self._stream.isatty()
        self._open = False  # an in-place line is on screen without its newline

    @property
    def tty(self) -> bool:
        """True when updates rewrite one line (the stream is a terminal)."""
        return self._tty

    def update(self, text: str) -> None:
        """Replace the status with ``text``."""
        if self._tty:
            self._stream.write(f"\r{text}{_CLEAR_TO_EOL}")
            self._open = True
        else:
            self._stream.write(text + "\n")
        self._stream.flush()

    def message(self, text: str) -> None:
        """Print a message of its own line, below the status (which a new update redraws)."""
        self.close()
        self._stream.write(text + "\n")
        self._stream.flush()

    def close(self) -> None:
        """End the in-place line, so that what follows starts on a line of its own."""
        if self._open:
            self._stream.write("\n")
            self._stream.flush()
            self._open = False
