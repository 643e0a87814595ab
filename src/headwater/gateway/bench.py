"""``python -m headwater.gateway.bench``: what the gateway's durable spool costs.

The same benchmark as ``headwater bench gateway``: it starts the embedded broker and the
ingest server in its own process (``headwater.bench.server_proc``, as the ingest benchmark
does), sends the same records directly and through a spool, and prints msgs/s and the
ratio spooled / direct (``--json`` for one JSON line). The scenarios live in
``headwater.bench.gateway_bench``, next to the other benchmarks; this entry point is here
so the gateway library's cost is found where the library is.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from headwater.cli import main as headwater_main


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``headwater bench gateway`` with ``argv`` (default: the command line)."""
    return headwater_main(["bench", "gateway", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
