"""Print rows as an aligned table or as JSON lines: every ops command offers both."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any


def table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    """Return ``rows`` as a plain-text table with the given columns."""
    if not rows:
        return "(nothing)"
    cells = [[str(row.get(c, "")) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(lines)


def emit(rows: Sequence[dict[str, Any]], columns: Sequence[str], as_json: bool) -> None:
    """Print ``rows`` as a table, or one JSON object per line."""
    if as_json:
        for row in rows:
            print(json.dumps(row, default=str))
    else:
        print(table(rows, columns))
