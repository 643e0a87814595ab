"""Print rows as an aligned table or as JSON lines: every ops command offers both."""

from __future__ import annotations

import itertools
import json
import unicodedata
from collections.abc import Iterable, Sequence
from typing import Any

#: Unicode categories that draw nothing of their own or drive the terminal: controls (Cc),
#: format characters (Cf: every bidirectional control, zero-width ones, tag characters),
#: line and paragraph separators (Zl, Zp), private use (Co), surrogates (Cs) and code
#: points unassigned in this Python's Unicode (Cn). By category, not by a hand list: a
#: code point added to one of them is escaped without a change here.
_INVISIBLE = frozenset({"Cc", "Cf", "Zl", "Zp", "Co", "Cs", "Cn"})


def escape(text: str, keep: str = "") -> str:
    r"""Return ``text`` with invisible characters as ``\xNN`` / ``\uNNNN`` / ``\UNNNNNNNN``.

    What reaches an operator's terminal (dead letters quote device payloads: field names,
    units, error texts) could otherwise move the cursor, clear the screen, set the window
    title, reorder the text or hide some of it. ``keep`` names characters left as they are
    (a payload's line ends).
    """
    if text.isprintable():  # the usual case: str.isprintable is False for every category above
        return text
    return "".join(
        _escaped(ch) if ch not in keep and unicodedata.category(ch) in _INVISIBLE else ch
        for ch in text
    )


def _escaped(ch: str) -> str:
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


#: Rows a streamed table sizes its columns by; longer values later just widen their line.
TABLE_PAGE = 1000


def table(rows: Iterable[dict[str, Any]], columns: Sequence[str]) -> str:
    """Return ``rows`` as a plain-text table with the given columns."""
    return "\n".join(table_lines(rows, columns))


def table_lines(rows: Iterable[dict[str, Any]], columns: Sequence[str]) -> Iterable[str]:
    """Yield ``rows`` as table lines, holding no more than ``TABLE_PAGE`` rows at a time.

    Column widths come from the header and the first ``TABLE_PAGE`` rows: a dead-letter
    topic of any size is printed in bounded memory.
    """
    rows = iter(rows)
    first = [_cells(row, columns) for row in itertools.islice(rows, TABLE_PAGE)]
    if not first:
        yield "(nothing)"
        return
    widths = [max(len(c), *(len(r[i]) for r in first)) for i, c in enumerate(columns)]
    yield _line([c.upper() for c in columns], widths)
    for cells in itertools.chain(first, (_cells(row, columns) for row in rows)):
        yield _line(cells, widths)


def _cells(row: dict[str, Any], columns: Sequence[str]) -> list[str]:
    return [escape(str(row.get(c, ""))) for c in columns]


def _line(cells: Sequence[str], widths: Sequence[int]) -> str:
    return "  ".join(v.ljust(w) for v, w in zip(cells, widths, strict=True))


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


def emit(rows: Iterable[dict[str, Any]], columns: Sequence[str], as_json: bool) -> None:
    """Print ``rows`` as a table, or one JSON object per line, as they come."""
    if as_json:
        for row in rows:
            print(json.dumps(row, default=str))
    else:
        for line in table_lines(rows, columns):
            print(line)
