"""``headwater normalize``: run one payload through the normalizer registry, without Kafka or Spark.

Prints the common-format event as JSON (exit 0) or the dead-letter reason (exit 1), so a
vendor integration, or a normalizer plugin, can be tried on a real payload file. Only
argparse at import time: ``headwater --help`` stays fast.
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
        help="run a payload file through the normalizers; print the event or the dead letter",
        description=(
            "Normalize one device payload as the enricher would, without Kafka or Spark: "
            "print the common-format event as JSON (exit 0), or the dead-letter stage, "
            "reason and message (exit 1). --list shows every format the registry holds, "
            "built-in and from installed packages (entry points 'headwater.normalizers')."
        ),
    )
    cmd.add_argument("payload", nargs="?", help="payload file ('-' for stdin)")
    cmd.add_argument(
        "--content-type",
        "-t",
        help="the message's content_type, e.g. 'application/vnd.acme.telemetry.v1+json'",
    )
    cmd.add_argument(
        "--birth",
        action="append",
        default=[],
        metavar="FILE",
        help=(
            "a Sparkplug B DBIRTH payload of the device, applied first so that aliases "
            "resolve (repeatable, in order)"
        ),
    )
    cmd.add_argument("--device-id", default="device-1", help="device id put on the event")
    cmd.add_argument("--list", action="store_true", help="list the registered formats and exit")
    cmd.set_defaults(func=_run)


def _read(path: str) -> bytes:
    return sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()


def normalize_file(
    content_type: str, payload: bytes, births: list[bytes], device_id: str = "device-1"
) -> tuple[int, dict[str, Any]]:
    """Return ``(exit code, JSON document)`` for one payload, as the enricher would see it."""
    from google.protobuf import json_format

    from headwater.enricher.executor.formats.base import NormalizeError
    from headwater.enricher.executor.formats.sparkplug import CONTENT_TYPE as SPARKPLUG
    from headwater.enricher.executor.normalize import normalize_message
    from headwater.enricher.python_operator.births import Definitions, apply_to_row
    from headwater.enricher.python_operator.enrich import build_events

    defs = Definitions()
    for i, birth in enumerate(births):
        row = normalize_message(f"{SPARKPLUG}; message-type=DBIRTH", birth)
        if row.get("error_reason"):
            return 1, {"birth": i, "dead_letter": _dead(row)}
        apply_to_row(row, defs)
    row = normalize_message(content_type, payload)
    if row.get("error_reason"):
        return 1, {"dead_letter": _dead(row)}
    try:
        row = apply_to_row(row, defs)
    except NormalizeError as exc:
        return 1, {"dead_letter": {"stage": "normalize", "reason": exc.reason, "message": str(exc)}}
    msg = {
        "message_id": "cli",
        "device_id": device_id,
        "tenant": "",
        "gateway_id": "",
        "sequence": 0,
        "device_time_ms": 0,
        "received_ms": 0,
        **{k: None for k in ("alarm_code", "alarm_severity", "alarm_text")},
        **row,
    }
    events = build_events(msg, {})
    docs = [json_format.MessageToDict(e, preserving_proto_field_name=True) for e in events]
    return 0, {"events": docs}


def _dead(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "stage": row["error_stage"],
        "reason": row["error_reason"],
        "message": row["error_message"],
    }


def _run(args: argparse.Namespace) -> int:
    if args.list:
        from headwater.enricher.executor.formats.registry import loaded

        for entry in loaded():
            status = f"  SKIPPED: {entry.error}" if entry.error else ""
            print(f"{entry.content_type}\t{entry.origin}{status}")
        return 0
    if not args.payload or not args.content_type:
        print("headwater normalize: a payload file and --content-type are needed", file=sys.stderr)
        return 2
    try:
        payload = _read(args.payload)
        births = [_read(p) for p in args.birth]
    except OSError as exc:
        print(f"headwater normalize: {exc}", file=sys.stderr)
        return 2
    code, doc = normalize_file(args.content_type, payload, births, args.device_id)
    print(json.dumps(doc, indent=2, ensure_ascii=False))
    return code
