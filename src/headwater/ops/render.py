"""Print rows as an aligned table or as JSON lines: every ops command offers both."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

# C0 and C1 controls, DEL, and the invisible format characters that reorder or hide text
# (bidirectional overrides, zero-width): text from payloads must not drive the terminal.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]")


def escape(text: str, keep: str = "") -> str:
    r"""Return ``text`` with control characters as ``\xNN`` / ``\uNNNN`` escapes.

    What reaches an operator's terminal (dead letters quote device payloads: field names,
    units, error texts) could otherwise move the cursor, clear the screen or set the window
    title. ``keep`` names characters left as they are (a payload's line ends).
    """

    def one(m: re.Match[str]) -> str:
        ch = m.group()
        if ch in keep:
            return ch
        code = ord(ch)
        return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"

    return _CONTROL.sub(one, text)


def table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    """Return ``rows`` as a plain-text table with the given columns."""
    if not rows:
        return "(nothing)"
    cells = [[escape(str(row.get(c, ""))) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(lines)


def fields(row: dict[str, Any], width: int = 16) -> str:
    """Return one record as ``name: value`` lines, every value escaped (``escape``)."""
    return "\n".join(f"{escape(str(k)):>{width}}: {_value(v)}" for k, v in row.items())


def _value(v: Any) -> str:
    if isinstance(v, dict):
        return "{" + ", ".join(f"{escape(str(k))!s}: {escape(str(x))}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(escape(str(x)) for x in v) + "]"
    # A multi-line payload keeps its line ends (and tabs); nothing else.
    return escape(str(v), keep="\n\t")


def emit(rows: Sequence[dict[str, Any]], columns: Sequence[str], as_json: bool) -> None:
    """Print ``rows`` as a table, or one JSON object per line."""
    if as_json:
        for row in rows:
            print(json.dumps(row, default=str))
    else:
        print(table(rows, columns))
