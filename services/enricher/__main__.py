"""``python -m headwater.enricher run ...``: the enricher CLI without the ``headwater`` wrapper."""

from __future__ import annotations

import argparse
import sys

from headwater.enricher.cli import register


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` as ``headwater enricher ...`` would and run the command."""
    parser = argparse.ArgumentParser(prog="python -m headwater.enricher")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["enricher", *(sys.argv[1:] if argv is None else argv)])
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
