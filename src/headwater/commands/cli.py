"""``headwater command``: send a command to a device, show its states, list a device's.

Only the standard library at import time: Kafka is imported when a command runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from headwater.kafka.options import add_kafka_options, kafka_from_args, topic_prefix_from_args

#: Exit status when ``status`` finds no such command.
NOT_FOUND = 1
#: Exit status when a command is refused (bad input, not permitted).
REFUSED = 2


def _common(parser: argparse.ArgumentParser) -> None:
    add_kafka_options(parser, topic_prefix=True)
    parser.add_argument("--json", action="store_true", help="print JSON")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``command`` group."""
    group = subparsers.add_parser(
        "command",
        help="commands to devices: send one, show its states, list a device's",
        description=(
            "Commands to devices (docs/commands.md): written to commands.v1, delivered by "
            "ingest to the gateway bound to the device, their states written to "
            "command-status.v1 (QUEUED, DELIVERED, EXECUTED, FAILED, EXPIRED, REJECTED)."
        ),
    )
    commands = group.add_subparsers(dest="command_command", required=True, metavar="COMMAND")

    send = commands.add_parser(
        "send",
        help="send a command to one device; print its id",
        description=(
            "Check the command (tenant permitted by $HEADWATER_COMMAND_TENANTS, device in "
            "master.devices.v1, payload at most 64 KiB, TTL positive), write it to "
            "commands.v1 and its QUEUED status to command-status.v1. Sending the same "
            "--id again is safe: it stays one command. Exit 2 when refused."
        ),
    )
    _common(send)
    send.add_argument("--tenant", required=True, help="the device's tenant")
    send.add_argument("--device", required=True, dest="device_id", help="the device id")
    send.add_argument("--name", required=True, help='what to do, e.g. "set-setpoint"')
    send.add_argument(
        "--payload-file", type=Path, help="the command's argument (default: empty); '-': stdin"
    )
    send.add_argument("--media-type", default="application/json", help="the payload's media type")
    send.add_argument(
        "--ttl",
        type=float,
        default=3600.0,
        help="seconds the command waits for its gateway before it expires (default 3600)",
    )
    send.add_argument("--id", dest="command_id", help="the command id (default: a new UUIDv7)")
    send.set_defaults(func=_send)

    status = commands.add_parser(
        "status",
        help="show one command's state and every status record",
        description="Read command-status.v1 to its end; print the command's states. Exit 1 "
        "if the id is not found.",
    )
    _common(status)
    status.add_argument("command_id", metavar="ID", help="the command id")
    status.set_defaults(func=_status)

    listing = commands.add_parser(
        "list",
        help="list the commands of a device with their current state",
        description="Read command-status.v1 to its end; print the device's commands, oldest first.",
    )
    _common(listing)
    listing.add_argument("--device", required=True, dest="device_id", help="the device id")
    listing.add_argument("--tenant", help="only this tenant's device of that id")
    listing.set_defaults(func=_list)


def _kafka(args: argparse.Namespace) -> Any:
    return kafka_from_args(args)


def _send(args: argparse.Namespace) -> int:
    from headwater.commands.errors import CommandRefusedError
    from headwater.commands.sender import CommandSender
    from headwater.commands.settings import SenderSettings

    if args.payload_file is None:
        payload = b""
    elif str(args.payload_file) == "-":
        payload = sys.stdin.buffer.read()
    else:
        try:
            payload = args.payload_file.read_bytes()
        except OSError as exc:
            print(f"headwater command send: cannot read --payload-file: {exc}", file=sys.stderr)
            return REFUSED
    tenants = list(SenderSettings.from_env().tenants)
    try:
        with CommandSender(
            _kafka(args), tenants, topic_prefix=topic_prefix_from_args(args)
        ) as sender:
            sent = sender.send(
                args.tenant,
                args.device_id,
                args.name,
                payload,
                media_type=args.media_type,
                ttl_s=args.ttl,
                command_id=args.command_id,
            )
    except CommandRefusedError as exc:
        print(f"headwater command send: refused ({exc.reason}): {exc}", file=sys.stderr)
        return REFUSED
    cmd = sent.command
    row = {
        "command_id": cmd.command_id,
        "tenant": cmd.tenant,
        "device_id": cmd.device_id,
        "name": cmd.name,
        "state": "QUEUED",
        "expires_at_ms": cmd.expires_time.ToMilliseconds(),
        "partition": sent.partition,
        "offset": sent.offset,
    }
    print(json.dumps(row) if args.json else f"{cmd.command_id} QUEUED")
    return 0


def _histories(args: argparse.Namespace) -> Any:
    from headwater.commands.history import read_histories
    from headwater.topics import COMMAND_STATUS_TOPIC

    return read_histories(_kafka(args), topic_prefix_from_args(args) + COMMAND_STATUS_TOPIC)


def _status(args: argparse.Namespace) -> int:
    from headwater.commands.history import as_row

    history = _histories(args).get(args.command_id)
    if history is None:
        print(f"headwater command status: no command {args.command_id!r}", file=sys.stderr)
        return NOT_FOUND
    row = as_row(history)
    if args.json:
        print(json.dumps(row))
    else:
        print(
            f"{row['command_id']} {row['state']} {row['tenant']}/{row['device_id']} "
            f"{row['name']} {row['reason']}".rstrip()
        )
        print("  states: " + " -> ".join(row["states"]))  # type: ignore[arg-type]
        if row["gateway_id"]:  # the device's owning gateway, which received the command
            print(f"  gateway: {row['gateway_id']}")
    return 0


def _list(args: argparse.Namespace) -> int:
    from headwater.commands.history import as_row

    rows = [
        as_row(h)
        for h in _histories(args).values()
        if h.current.device_id == args.device_id
        and (args.tenant is None or h.current.tenant == args.tenant)
    ]
    rows.sort(key=lambda r: (int(r["first_ms"]), str(r["command_id"])))  # type: ignore[call-overload]
    for row in rows:
        if args.json:
            print(json.dumps(row))
        else:
            print(f"{row['command_id']} {row['state']:<9} {row['name']} {row['reason']}".rstrip())
    return 0
