"""The ``headwater`` command: one subcommand group per job.

Each group registers itself from its own package and imports its heavy dependencies
(Spark, gRPC) only when it runs, so ``headwater --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

#: Modules that provide ``register(subparsers)``, in the order shown by --help.
COMMAND_MODULES = (
    "headwater.devstack.cli",
    "headwater.ingest.cli",
    "headwater.enricher.cli",
    "headwater.enricher.normalize_cli",
    "headwater.topics_cli",
    "headwater.ops.cli",
    "headwater.gateway.cli",
    "headwater.bench.cli",
)


def build_parser() -> argparse.ArgumentParser:
    """Return the parser with every available command group registered."""
    parser = argparse.ArgumentParser(
        prog="headwater",
        description=(
            "Headwater: device data from edge gateways over gRPC into Kafka, and out again "
            "as enriched common-format events."
        ),
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``headwater`` command."""
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
