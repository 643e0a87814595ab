"""Seen stores (``DedupStore``): remember which ids a subscriber has handled.

(Named ``seen``, not ``dedup``: the enricher's ``dedupe.py`` is another thing, its keyed
state's memory of message ids.)

Delivery is at least once (a crash between handling and commit delivers again, and the
enricher may write an event twice when Spark replays a batch), so a subscriber checks an
id before handling and records it after. In memory for a process that can afford to
handle a message twice after a restart; SQLite when a restart must not repeat side effects.
Either way, make the handler's writes idempotent too (upserts keyed by the event id):
the store narrows the window, it cannot close it for side effects outside itself.
"""

from __future__ import annotations

import sqlite3
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Protocol


class DedupStore(Protocol):
    """Which ids were handled; bounded (old ids fall out)."""

    def seen(self, key: str) -> bool:
        """Return True if ``key`` was recorded."""
        ...

    def record(self, key: str) -> None:
        """Remember ``key`` as handled."""
        ...


class MemoryDedup:
    """The last ``max_entries`` ids, in memory (LRU)."""

    def __init__(self, max_entries: int = 100_000) -> None:
        self._ids: OrderedDict[str, None] = OrderedDict()
        self._max = max_entries

    def seen(self, key: str) -> bool:
        """Return True if ``key`` was recorded (and keep it fresh)."""
        if key in self._ids:
            self._ids.move_to_end(key)
            return True
        return False

    def record(self, key: str) -> None:
        """Remember ``key``; forget the least recently seen beyond the bound."""
        self._ids[key] = None
        self._ids.move_to_end(key)
        while len(self._ids) > self._max:
            self._ids.popitem(last=False)


class SqliteDedup:
    """The last ``max_entries`` ids in a SQLite file: survives restarts and crashes."""

    def __init__(self, path: str | Path, max_entries: int = 1_000_000) -> None:
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS handled (n INTEGER PRIMARY KEY AUTOINCREMENT, "
            "key TEXT NOT NULL UNIQUE)"
        )
        self._max = max_entries
        self._lock = threading.Lock()

    def seen(self, key: str) -> bool:
        """Return True if ``key`` was recorded."""
        with self._lock:
            return (
                self._db.execute("SELECT 1 FROM handled WHERE key = ?", (key,)).fetchone()
                is not None
            )

    def record(self, key: str) -> None:
        """Remember ``key`` (committed before this returns); prune the oldest now and then."""
        with self._lock:
            cur = self._db.execute("INSERT OR IGNORE INTO handled (key) VALUES (?)", (key,))
            if cur.lastrowid and cur.lastrowid % 1000 == 0:
                self._db.execute(
                    "DELETE FROM handled WHERE n <= (SELECT MAX(n) FROM handled) - ?", (self._max,)
                )

    def close(self) -> None:
        """Close the file."""
        with self._lock:
            self._db.close()
