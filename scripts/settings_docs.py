"""Write the settings tables of the docs from the settings declarations (``make docs``).

A table lives between two marker comments that name the settings classes it shows::

    <!-- settings: headwater.kafka.settings.KafkaSettings -->
    ...generated table...
    <!-- end settings -->

Several classes (comma-separated) share one table. ``fields`` after the names adds the field
column and the settings given in code only (for libraries configured in code too: the
gateway, the subscriber). With ``--check`` nothing is written: the exit status is 1 when a
table differs from its declarations (the test suite runs that check), naming the stale files.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The files that hold settings tables.
DOCS = (
    "README.md",
    "docs/enricher.md",
    "docs/gateway.md",
    "docs/subscribe.md",
    "docs/operations.md",
)

_BLOCK = re.compile(
    r"(?P<open><!-- settings: (?P<classes>[\w., ]+?)(?P<fields> fields)? -->\n)"
    r"(?P<table>.*?)"
    r"(?P<close><!-- end settings -->)",
    re.DOTALL,
)


def _settings_class(path: str) -> type:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def render(text: str) -> str:
    """Return ``text`` with every marked table regenerated from its class."""

    def table(match: re.Match[str]) -> str:
        tables = [
            _settings_class(name.strip()).markdown_table(with_fields=bool(match["fields"]))
            for name in match["classes"].split(",")
        ]
        body = tables[0] + "".join(t.split("\n", 2)[2] for t in tables[1:])  # one header
        return match["open"] + body + match["close"]

    return _BLOCK.sub(table, text)


def stale(paths: list[Path]) -> list[Path]:
    """Return the files among ``paths`` whose tables differ from their declarations."""
    return [p for p in paths if render(p.read_text()) != p.read_text()]


def main(argv: list[str] | None = None) -> int:
    """Rewrite the tables (or, with ``--check``, report stale ones with exit status 1)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if stale")
    parser.add_argument("files", nargs="*", type=Path, help="default: the project's docs")
    args = parser.parse_args(argv)
    paths = args.files or [ROOT / name for name in DOCS]
    behind = stale(paths)
    if args.check:
        for path in behind:
            print(f"{path}: settings table is stale; run `make docs`", file=sys.stderr)
        return 1 if behind else 0
    for path in behind:
        path.write_text(render(path.read_text()))
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
