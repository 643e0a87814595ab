"""``python -m headwater.enricher run ...``: the enricher CLI without the ``headwater`` wrapper."""

from __future__ import annotations

import sys

from headwater.cli import main as headwater_main


def main(argv: list[str] | None = None) -> int:
    """Run ``headwater enricher ...`` with ``argv`` (start-up failures in one line, exit 2)."""
    return headwater_main(["enricher", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
