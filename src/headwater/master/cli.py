"""``headwater master``: load, put, delete and show device master data.

Without master data every message of a device ends as ``MASTER_DATA_MISSING``; this is
how operators provide it (docs/operations.md, "Master data"). Only the standard library
at import time: Kafka and YAML are imported when a command runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from headwater.kafka.options import add_kafka_options, kafka_from_args, topic_prefix_from_args

#: Exit status when ``show`` finds no record, and when a file or the topic is refused.
NOT_FOUND = 1
REFUSED = 2


def _common(parser: argparse.ArgumentParser) -> None:
    add_kafka_options(parser, topic_prefix=True)
    parser.add_argument("--json", action="store_true", help="print JSON")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``master`` command group."""
    from headwater.kafka.settings import KafkaSettings
    from headwater.runtime.startup import EnvHelpFormatter, env_help

    group = subparsers.add_parser(
        "master",
        help="device master data: load files, put, delete and show devices",
        description=(
            "Device master data (headwater.master.v1.DeviceMaster) in the compacted topic "
            "master.devices.v1, keyed <tenant>/<device_id>. The enricher needs a record for "
            "every device it enriches. Kafka connection and security come from the "
            "variables below; a Kafka flag overrides its variable."
        ),
        epilog=env_help(KafkaSettings.from_env),
        formatter_class=EnvHelpFormatter,
    )
    commands = group.add_subparsers(dest="master_command", required=True, metavar="COMMAND")

    load = commands.add_parser(
        "load",
        help="load devices from CSV, JSON or YAML files; print what changed",
        description=(
            "Read every file (by extension: .csv with a header row, .json array or .jsonl, "
            ".yaml list or devices: list; fields tenant, device_id, vendor_format required, "
            "site, area_code, model optional), check all of them, compare with the topic and "
            "write the records that are new or changed. A bad file writes nothing and says "
            "file:line. Prints added/updated/unchanged/deleted counts. With --prune, a load "
            "that deletes devices is a dry run (it lists them) unless --execute is given or "
            "the deletion is confirmed at the prompt."
        ),
    )
    _common(load)
    load.add_argument("files", nargs="+", type=Path, metavar="FILE")
    load.add_argument(
        "--dry-run", action="store_true", help="check and compare only; write nothing"
    )
    load.add_argument(
        "--prune",
        action="store_true",
        help="also delete devices of the files' tenants that the files do not list "
        "(a dry run unless --execute or confirmed)",
    )
    load.add_argument("--execute", action="store_true", help="with --prune: delete without asking")
    load.set_defaults(func=_load)

    put = commands.add_parser(
        "put",
        help="write one device's master record (replaces the whole record)",
        description="Write one device's master record; fields left out are written empty.",
    )
    _common(put)
    _device(put)
    put.add_argument("--vendor-format", required=True, help="payload format, e.g. acme.v1+json")
    put.add_argument("--site", default="", help="site the device is installed at")
    put.add_argument("--area-code", default="", help="area within the site")
    put.add_argument("--model", default="", help="device model")
    put.set_defaults(func=_put)

    delete = commands.add_parser(
        "delete",
        help="delete one device's master record (a tombstone)",
        description=(
            "Write a tombstone for the device: the enricher forgets it, and its messages "
            "end as MASTER_DATA_MISSING until it has master data again."
        ),
    )
    _common(delete)
    _device(delete)
    delete.set_defaults(func=_delete)

    show = commands.add_parser(
        "show",
        help="print a device's current master record",
        description="Read the topic to its end and print the device's record. Exits 1 if none.",
    )
    _common(show)
    _device(show)
    show.set_defaults(func=_show)


def _device(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tenant", required=True, help="the device's tenant")
    parser.add_argument("--device", required=True, dest="device_id", help="the device id")


def _kafka(args: argparse.Namespace) -> Any:
    return kafka_from_args(args)


def _topic(args: argparse.Namespace) -> str:
    from headwater.master.store import master_topic

    return master_topic(topic_prefix_from_args(args))


def _fail(args: argparse.Namespace, exc: Exception) -> int:
    print(f"headwater master {args.master_command}: {exc}", file=sys.stderr)
    return REFUSED


def _load(args: argparse.Namespace) -> int:
    from headwater.master import store
    from headwater.master.records import MasterFileError, read_files

    dry_run = args.dry_run
    try:
        located = read_files(args.files)
        kafka, topic = _kafka(args), _topic(args)
        changes = store.plan(
            store.read_current(kafka, topic), [x.record for x in located], args.prune
        )
        if changes.deleted and not dry_run and not _prune_confirmed(args, changes.deleted):
            dry_run = True  # tombstones are for good: nothing is written unconfirmed
        if not dry_run:
            store.apply(kafka, topic, changes)
    except (MasterFileError, store.MasterStoreError) as exc:
        return _fail(args, exc)
    counts = changes.counts()
    if args.json:
        print(json.dumps({"topic": topic, "dry_run": dry_run, **counts}))
    else:
        verb = "would change (dry run)" if dry_run else "loaded"
        summary = ", ".join(f"{n} {what}" for what, n in counts.items())
        files = f"{len(located)} device(s) from {len(args.files)} file(s)"
        print(f"{verb} {files} into {topic}: {summary}")
    if dry_run and not args.dry_run:
        print(
            f"dry run: nothing written; --prune would delete {len(changes.deleted)} device(s) "
            "(add --execute to apply)",
            file=sys.stderr,
        )
    return 0


def _prune_confirmed(args: argparse.Namespace, deleted: list[str]) -> bool:
    """Return True when the operator wants the tombstones: --execute, or typed at a prompt.

    As ``offsets reset`` and ``dlq redrive``: what cannot be undone is shown first, and
    happens only when asked for by name (here: the number of devices it deletes).
    """
    shown = deleted[:20]
    more = f" and {len(deleted) - len(shown)} more" if len(deleted) > len(shown) else ""
    print(f"--prune deletes: {', '.join(shown)}{more}", file=sys.stderr)
    if args.execute:
        return True
    if not sys.stdin.isatty():
        return False
    answer = input(f"Type the number of devices to delete ({len(deleted)}) to apply: ")
    return answer.strip() == str(len(deleted))


def _put(args: argparse.Namespace) -> int:
    from headwater.master import store
    from headwater.master.records import MasterFileError, to_record

    fields = {
        "tenant": args.tenant,
        "device_id": args.device_id,
        "vendor_format": args.vendor_format,
        "site": args.site,
        "area_code": args.area_code,
        "model": args.model,
    }
    try:
        record = to_record(fields, "command line")
        store.write(_kafka(args), _topic(args), [record])
    except (MasterFileError, store.MasterStoreError) as exc:
        return _fail(args, exc)
    print(json.dumps(_as_dict(record)) if args.json else f"put {args.tenant}/{args.device_id}")
    return 0


def _delete(args: argparse.Namespace) -> int:
    from headwater.master import store
    from headwater.topics import scoped_key

    key = scoped_key(args.tenant, args.device_id)
    try:
        store.write(_kafka(args), _topic(args), deletes=[key])
    except store.MasterStoreError as exc:
        return _fail(args, exc)
    print(json.dumps({"deleted": key}) if args.json else f"deleted {key}")
    return 0


def _show(args: argparse.Namespace) -> int:
    from headwater.master import store
    from headwater.topics import scoped_key

    key = scoped_key(args.tenant, args.device_id)
    try:
        record = store.read_current(_kafka(args), _topic(args)).get(key)
    except store.MasterStoreError as exc:
        return _fail(args, exc)
    if record is None:
        print(f"headwater master show: no master record for {key}", file=sys.stderr)
        return NOT_FOUND
    fields = _as_dict(record)
    if args.json:
        print(json.dumps(fields))
    else:
        print("\n".join(f"{name:>13}: {value}" for name, value in fields.items()))
    return 0


def _as_dict(record: Any) -> dict[str, str]:
    from headwater.master.records import FIELDS

    return {name: getattr(record, name) for name in FIELDS}
