"""``headwater normalize``: run one payload through the enricher's normalize step, without Kafka.

Prints the normalized row that the enricher's Python hop hands to its state operator, as JSON
(exit 0), or the dead-letter reason (exit 1), so a vendor integration, or a normalizer
plugin, can be tried on a real payload file. The row is computed by the hop's own functions
(``normalize.normalize_message``, units converted included): what comes after it (master
data, Sparkplug B alias resolution against the device's births, dedup, the event's bytes)
happens in the JVM state operator and is not shown. Only argparse at import time:
``headwater --help`` stays fast.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``normalize`` command."""
    cmd = subparsers.add_parser(
        "normalize",
        help="run a payload file through the normalizers; print the normalized row or the "
        "dead letter",
        description=(
            "Normalize one device payload as the enricher's normalize step does, without Kafka "
            "or Spark: print the normalized row ({'normalized': ...}: event type, source "
            "format, measurements; for Sparkplug B the definitions, the readings still by "
            "alias and the unit conversions) as JSON (exit 0), or the dead-letter stage, "
            "reason and message (exit 1). Master data, Sparkplug B aliases and the event "
            "itself come later, in the enricher's state operator. --list shows every format "
            "the registry holds, built-in and from installed packages (entry points "
            "'headwater.normalizers')."
        ),
    )
    cmd.add_argument("payload", nargs="?", help="payload file ('-' for stdin)")
    cmd.add_argument(
        "--content-type",
        "-t",
        help="the message's content_type, e.g. 'application/vnd.acme.telemetry.v1+json'",
    )
    cmd.add_argument("--list", action="store_true", help="list the registered formats and exit")
    cmd.set_defaults(func=_run)


def _read(path: str) -> bytes:
    return sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()


def normalize_file(content_type: str, payload: bytes) -> tuple[int, dict[str, Any]]:
    """Return ``(exit code, JSON document)`` for one payload: the normalized row, or why not."""
    from headwater.enricher.hop.normalize import normalize_message

    row = normalize_message(content_type, payload)
    if row.get("error_reason"):
        return 1, {
            "dead_letter": {
                "stage": row["error_stage"],
                "reason": row["error_reason"],
                "message": row["error_message"],
            }
        }
    return 0, {"normalized": row}


def _run(args: argparse.Namespace) -> int:
    if args.list:
        from headwater.enricher.hop.formats.registry import loaded

        for entry in loaded():
            status = f"  SKIPPED: {entry.error}" if entry.error else ""
            print(f"{entry.content_type}\t{entry.origin}{status}")
        return 0
    if not args.payload or not args.content_type:
        print("headwater normalize: a payload file and --content-type are needed", file=sys.stderr)
        return 2
    try:
        payload = _read(args.payload)
    except OSError as exc:
        print(f"headwater normalize: {exc}", file=sys.stderr)
        return 2
    code, doc = normalize_file(args.content_type, payload)
    print(json.dumps(doc, indent=2, ensure_ascii=False))
    return code
