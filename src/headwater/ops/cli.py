"""``headwater dlq``, ``offsets``, ``lag`` and ``status``: operator commands.

``status`` checks a Helm release on Kubernetes (ingest pods, the enricher's
SparkApplication and its lag; exit 1 when something needs attention); the others talk to
Kafka. ``headwater topics`` and ``headwater master`` register from their own
modules (``ops/topics.py``, ``master/cli.py``).
"""

from __future__ import annotations

import argparse
import getpass
import sys
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from headwater.ops.dlq import DeadLetters
    from headwater.ops.progress import Progress

from headwater.errors import HeadwaterError
from headwater.kafka.options import add_kafka_options, kafka_from_args
from headwater.topics import DEADLETTER_TOPIC


def _kafka_and_json(parser: argparse.ArgumentParser) -> None:
    add_kafka_options(parser)
    parser.add_argument("--json", action="store_true", help="one JSON object per line")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``dlq``, ``offsets``, ``lag`` and ``status`` command groups."""
    _register_dlq(subparsers)
    _register_offsets(subparsers)
    _register_lag(subparsers)
    _register_status(subparsers)


def _register_dlq(subparsers: argparse._SubParsersAction) -> None:
    from headwater.ops.reasons import REASONS

    dlq = subparsers.add_parser(
        "dlq", help="inspect and redrive dead letters", description="Dead letters (deadletter.v1)."
    )
    commands = dlq.add_subparsers(dest="dlq_command", required=True, metavar="COMMAND")
    reasons = "reasons a dead letter carries:\n" + "\n".join(
        f"  {reason:<21} {meaning}" for reason, meaning in REASONS.items()
    )
    for name, helptext in (
        ("list", "list dead letters, one line each"),
        ("show", "show dead letters in full, with the original payload rendered"),
        ("redrive", "send dead letters back to their ingest topic (dry run unless --execute)"),
    ):
        cmd = commands.add_parser(
            name,
            help=helptext,
            description=helptext[0].upper() + helptext[1:] + ". The topic is streamed: "
            "memory stays bounded whatever its size; progress goes to stderr.",
            epilog=reasons,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        _kafka_and_json(cmd)
        cmd.add_argument("--reason", help="only this reason (listed below)")
        cmd.add_argument("--tenant", help="only this tenant (the source record's tenant header)")
        cmd.add_argument("--device", help="only this device id")
        cmd.add_argument("--message-id", action="append", help="only these message ids (repeat)")
        for bound in ("since", "until"):
            cmd.add_argument(
                f"--{bound}",
                help="ISO 8601 time with its offset, e.g. 2026-11-22T10:00:00Z or "
                "2026-11-22T11:00:00+01:00 (without one: UTC, and it says so)",
            )
        cmd.add_argument("--limit", type=_count, help="at most this many letters")
        cmd.add_argument(
            "--progress-every",
            type=_count,
            default=10_000,
            metavar="N",
            help="report progress on stderr every N records (default 10000; 0: never)",
        )
        cmd.add_argument("--topic", default=DEADLETTER_TOPIC, help="dead-letter topic")
        cmd.set_defaults(func=_dlq)
        if name == "redrive":
            cmd.add_argument("--why", required=True, help="why they are redriven (audit header)")
            cmd.add_argument("--by", default=getpass.getuser(), help="who redrives (default: you)")
            cmd.add_argument(
                "--execute", action="store_true", help="really send (default: dry run)"
            )
            cmd.add_argument(
                "--force",
                "--again",
                action="store_true",
                help="send messages that were redriven already too, failed again or not "
                "(default: skip them)",
            )
        else:
            cmd.add_argument(
                "--latest", action="store_true", help="only the latest letter of each message"
            )


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is negative")
    return value


class _BadInput(HeadwaterError, ValueError):
    """An option an operator gave that cannot be used; the message says why."""


def _when(option: str, text: str | None) -> datetime | None:
    """Parse an ISO time; one without an offset is UTC, and stderr says so."""
    if text is None:
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise _BadInput(
            f"{option} {text!r} is no ISO 8601 time (e.g. 2026-11-22T10:00:00Z)"
        ) from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
        print(
            f"headwater dlq: {option} {text} has no offset: taken as UTC ({value.isoformat()})",
            file=sys.stderr,
        )
    return value


def _dlq(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException

    from headwater.errors import HeadwaterError

    try:
        return _dlq_command(args)
    except (_BadInput, HeadwaterError, KafkaException) as exc:  # one line, not a traceback
        print(f"headwater dlq {args.dlq_command}: {exc}", file=sys.stderr)
        return 2


def _dlq_command(args: argparse.Namespace) -> int:
    from headwater.ops import dlq
    from headwater.ops.progress import Progress
    from headwater.ops.render import emit, fields

    command = f"headwater dlq {args.dlq_command}"
    progress = Progress(command, args.progress_every)
    letters = dlq.DeadLetters(
        kafka_from_args(args),
        args.topic,
        dlq.Filters(
            reason=args.reason,
            tenant=args.tenant,
            device=args.device,
            message_ids=frozenset(args.message_id) if args.message_id else None,
            since=_when("--since", args.since),
            until=_when("--until", args.until),
        ),
        progress,
    )
    if args.dlq_command == "redrive":
        return _redrive(args, letters, progress)
    chosen = dlq.limited(dlq.latest_per_message(letters) if args.latest else letters, args.limit)
    if args.dlq_command == "list":
        emit(
            (r.as_row() for r in chosen),
            ["offset", "time", "reason", "stage", "tenant", "device", "message_id", "redrives"],
            args.json,
        )
        return 0
    rows = (
        {
            **r.as_row(),
            "headers": {h.key: dlq.readable(h.value, 200) for h in r.letter.original_headers},
            "payload": dlq.readable(_payload_of(r.letter.original_value)),
            "redrive_history": [
                f"{x.redriven_time.ToDatetime(UTC).isoformat()} by {x.by}: {x.reason}"
                for x in r.letter.redrives
            ],
        }
        for r in chosen
    )
    if args.json:
        emit(rows, [], True)
    else:
        for row in rows:
            print(fields(row), end="\n\n")  # escaped: payload text reaches the terminal
    return 0


def _redrive(args: argparse.Namespace, letters: DeadLetters, progress: Progress) -> int:
    from headwater.ops import dlq
    from headwater.ops.render import emit

    counts = {"selected": 0, "would send": 0, "again": 0}

    def counted(results: Iterable[dlq.RedriveResult]) -> Iterator[dict[str, object]]:
        for r in results:
            counts["selected"] += 1
            counts["would send"] += not r.skipped_reason
            counts["again"] += r.skipped_reason == dlq.ALREADY_REDRIVEN
            yield r.__dict__

    results = dlq.redrive(
        kafka_from_args(args),
        letters,
        args.by,
        args.why,
        dry_run=not args.execute,
        force=args.force,
        limit=args.limit,
        progress=progress,
    )
    emit(
        counted(results),
        ["message_id", "device_id", "topic", "sent", "skipped_reason"],
        args.json,
    )
    if args.execute:
        done = f"sent {counts['would send']}"
    else:
        done = f"dry run, would send {counts['would send']} (add --execute)"
    if counts["again"]:
        done += f"; {counts['again']} skipped as redriven already (--force sends them again)"
    print(f"{done}; {counts['selected']} selected (latest letter of each message)", file=sys.stderr)
    return 0


def _payload_of(original_value: bytes) -> bytes:
    """The device payload inside an ingest record value, or the raw value if undecodable."""
    from google.protobuf.message import DecodeError

    from headwater.proto.device.v1 import device_message_pb2

    try:
        return device_message_pb2.DeviceMessage.FromString(original_value).payload
    except DecodeError:
        return original_value


def _register_offsets(subparsers: argparse._SubParsersAction) -> None:
    offsets = subparsers.add_parser(
        "offsets",
        help="show and reset consumer-group offsets",
        description="Consumer-group offsets. Nothing in Headwater resets an offset by itself.",
    )
    commands = offsets.add_subparsers(dest="offsets_command", required=True, metavar="COMMAND")
    show = commands.add_parser(
        "show",
        help="committed offsets against log start and end",
        description="Show a group's committed offsets against the log start and end.",
    )
    _kafka_and_json(show)
    show.add_argument("--group", required=True, help="consumer group id")
    show.add_argument("--topic", action="append", help="topics (default: those it committed)")
    show.set_defaults(func=_offsets_show)
    reset = commands.add_parser(
        "reset",
        help="reset a group's offsets (dry run unless --execute or confirmed)",
        description=(
            "Reset a group's offsets to earliest, latest, a timestamp or an explicit offset. "
            "Prints the plan (dry run) unless --execute is given or the plan is confirmed at "
            "the prompt. Refused while the group has active members."
        ),
    )
    _kafka_and_json(reset)
    reset.add_argument("--group", required=True, help="consumer group id")
    reset.add_argument("--topic", action="append", required=True, help="topics to reset (repeat)")
    reset.add_argument("--to", required=True, choices=["earliest", "latest", "timestamp", "offset"])
    reset.add_argument(
        "--value", type=int, help="epoch ms for --to timestamp, offset for --to offset"
    )
    reset.add_argument("--execute", action="store_true", help="apply without asking")
    reset.set_defaults(func=_offsets_reset)
    checkpoint = commands.add_parser(
        "checkpoint",
        help="the enricher's Spark checkpoint: show it, or move its starting point",
        description=(
            "Show the offsets the enricher's checkpoint will resume from, or (stopped query "
            "only) move them, e.g. past data that retention deleted. A dry run unless "
            "--execute; changed files are backed up inside the checkpoint."
        ),
    )
    checkpoint.add_argument("action", choices=["show", "set-start"])
    checkpoint.add_argument(
        "--checkpoint",
        help="checkpoint directory (default: $HEADWATER_ENRICHER_CHECKPOINT_LOCATION)",
    )
    checkpoint.add_argument("--topic", help="topic whose start to move (set-start)")
    checkpoint.add_argument("--partition", type=int, action="append", help="partition (repeat)")
    target = checkpoint.add_mutually_exclusive_group()
    target.add_argument("--offset", type=int, help="the new next offset")
    target.add_argument(
        "--log-start", action="store_true", help="the log's first offset now (skips the gap)"
    )
    checkpoint.add_argument("--execute", action="store_true", help="really change it")
    _kafka_and_json(checkpoint)
    checkpoint.set_defaults(func=_offsets_checkpoint)


_OFFSET_COLUMNS = ["topic", "partition", "committed", "log_start", "log_end", "lag", "out_of_range"]


def _offsets_show(args: argparse.Namespace) -> int:
    from headwater.ops.offsets import admin_client, show
    from headwater.ops.render import emit

    emit(
        [p.as_row() for p in show(admin_client(kafka_from_args(args)), args.group, args.topic)],
        _OFFSET_COLUMNS,
        args.json,
    )
    return 0


def _offsets_reset(args: argparse.Namespace) -> int:
    from headwater.ops.offsets import OffsetsError, admin_client, apply_reset, plan_reset
    from headwater.ops.render import emit

    admin = admin_client(kafka_from_args(args))
    try:
        plan = plan_reset(admin, args.group, args.topic, args.to, args.value)
        emit(plan.rows(), [*_OFFSET_COLUMNS[:-1], "reset_to"], args.json)
        execute = args.execute
        if not execute and sys.stdin.isatty():
            answer = input(f"Type the group name ({args.group}) to apply this reset: ")
            execute = answer.strip() == args.group
        if not execute:
            print("dry run: nothing changed (add --execute to apply)", file=sys.stderr)
            return 0
        apply_reset(admin, plan)
    except OffsetsError as exc:
        print(f"headwater offsets reset: {exc}", file=sys.stderr)
        return 2
    print(f"reset {len(plan.moves)} partitions of group {args.group}", file=sys.stderr)
    return 0


def _offsets_checkpoint(args: argparse.Namespace) -> int:
    from headwater.ops.checkpoint import CheckpointError, read_checkpoint, set_start
    from headwater.ops.enricher_position import EnricherPosition
    from headwater.ops.render import emit

    columns = ["batch", "source", "topic", "partition", "next_offset"]
    location = args.checkpoint or EnricherPosition.from_env().checkpoint_location
    try:
        view = read_checkpoint(location)
        if args.action == "show":
            emit(view.rows(), columns, args.json)
            return 0
        if not args.topic or not args.partition or (args.offset is None and not args.log_start):
            print(
                "set-start needs --topic, --partition and --offset or --log-start", file=sys.stderr
            )
            return 2
        starts = _new_starts(args)
        print("new starting point:", ", ".join(f"{t}[{p}]={o}" for (t, p), o in starts.items()))
        if not args.execute:
            print("dry run: nothing changed (stop the query, then add --execute)", file=sys.stderr)
            return 0
        new_view, backup = set_start(location, starts)
    except CheckpointError as exc:
        print(f"headwater offsets checkpoint: {exc}", file=sys.stderr)
        return 2
    emit(new_view.rows(), columns, args.json)
    print(f"previous files kept in {backup}", file=sys.stderr)
    return 0


def _new_starts(args: argparse.Namespace) -> dict[tuple[str, int], int]:
    if not args.log_start:
        return {(args.topic, p): args.offset for p in args.partition}
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import OffsetSpec

    from headwater.ops.offsets import admin_client, log_offsets

    partitions = [TopicPartition(args.topic, p) for p in args.partition]
    starts = log_offsets(admin_client(kafka_from_args(args)), partitions, OffsetSpec.earliest())
    return dict(starts)


def _register_lag(subparsers: argparse._SubParsersAction) -> None:
    lag = subparsers.add_parser(
        "lag",
        help="consumer lag (by default the enricher's) and the consumer signals",
        description=(
            "Lag per group, topic and partition, plus the consumer signals (bytes out per "
            "second, producer-to-consumer and consumer-to-processing latency) scraped from "
            "--metrics-url when given. Without --group or --checkpoint it shows the "
            "enricher: the offsets it commits after each batch to its progress group "
            "($HEADWATER_ENRICHER_PROGRESS_GROUP, default headwater-enricher), for "
            "monitoring only. With --checkpoint it reads the enricher's Spark checkpoint "
            "instead, where a restart resumes from (works while the enricher is down)."
        ),
    )
    _kafka_and_json(lag)
    lag.add_argument(
        "--group",
        action="append",
        help="consumer group (repeat; default: the enricher's progress group)",
    )
    lag.add_argument(
        "--checkpoint",
        metavar="PATH",
        help="read the enricher's position from its checkpoint directory instead",
    )
    lag.add_argument("--topic", action="append", help="topics (default: those committed)")
    lag.add_argument("--metrics-url", help="Prometheus endpoint of the enricher")
    lag.add_argument("--watch", type=float, metavar="SECONDS", help="refresh every SECONDS")
    lag.set_defaults(func=_lag)


def _lag(args: argparse.Namespace) -> int:
    from headwater.ops.checkpoint import CheckpointError
    from headwater.ops.lag import checkpoint_lag, enricher_group, group_lag, scrape_signals
    from headwater.ops.offsets import admin_client
    from headwater.ops.render import emit
    from headwater.runtime.signals import stop_event

    groups = args.group or ([] if args.checkpoint else [enricher_group()])
    admin = admin_client(kafka_from_args(args))
    stop = stop_event() if args.watch else None  # Ctrl-C / SIGTERM end the refreshing
    while True:
        lags = [group_lag(admin, group, args.topic) for group in groups]
        if args.checkpoint:
            try:
                lags.append(checkpoint_lag(admin, args.checkpoint, args.topic))
            except CheckpointError as exc:
                print(f"headwater lag: {exc}", file=sys.stderr)
                return 2
        rows = [row for lag in lags for row in lag.rows()]
        summary: list[dict[str, object]] = [
            {"group": lag.group, "max_offset_lag": lag.max_lag} for lag in lags
        ]
        for lag in lags:
            if not lag.partitions:
                print(
                    f"headwater lag: group {lag.group!r} has committed no offsets (the enricher "
                    "commits its progress after each batch; while it is down, use --checkpoint)",
                    file=sys.stderr,
                )
        if args.metrics_url:
            signals = scrape_signals(args.metrics_url)
            summary = [{**s, **signals} for s in summary]
        if args.watch and not args.json:
            print("\033[2J\033[H", end="")
            print(datetime.now(UTC).isoformat(timespec="seconds"))
        emit(rows, ["group", *_OFFSET_COLUMNS], args.json)
        emit(summary, list(summary[0]) if summary else [], args.json)
        if stop is None or stop.wait(args.watch):
            return 0


def _register_status(subparsers: argparse._SubParsersAction) -> None:
    status = subparsers.add_parser(
        "status",
        help="health of a Kubernetes deployment (exit 1 when something needs attention)",
        description=(
            "Check a Helm release of Headwater on Kubernetes: ingest Deployment and pods "
            "(readiness, restarts), the enricher SparkApplication (state, submission "
            "attempts) and the enricher's lag per partition, from the offsets it commits to "
            "its progress group (or, with --checkpoint, from its checkpoint; --no-lag skips "
            "Kafka). Exits 1 when something needs attention, so it can gate a rollout."
        ),
    )
    status.add_argument("--namespace", default="headwater", help="Kubernetes namespace")
    status.add_argument("--release", default="headwater", help="Helm release name")
    lag = status.add_mutually_exclusive_group()
    lag.add_argument(
        "--group",
        help="consumer group whose lag to check (default: the enricher's progress group, "
        "$HEADWATER_ENRICHER_PROGRESS_GROUP or headwater-enricher)",
    )
    lag.add_argument("--checkpoint", metavar="PATH", help="take the lag from this checkpoint")
    lag.add_argument("--no-lag", action="store_true", help="do not check lag (no Kafka access)")
    status.add_argument("--lag-threshold", type=int, default=100_000, help="max acceptable lag")
    _kafka_and_json(status)
    status.set_defaults(func=_status)


def _status(args: argparse.Namespace) -> int:
    from headwater.ops.render import emit
    from headwater.ops.status import assess, fetch

    deployments, pods, spark_apps = fetch(args.namespace, args.release)
    progress, lag_error = None, ""
    if not args.no_lag:
        from confluent_kafka import KafkaException

        from headwater.ops.checkpoint import CheckpointError
        from headwater.ops.lag import checkpoint_lag, enricher_group, group_lag
        from headwater.ops.offsets import OffsetsError, admin_client

        admin = admin_client(kafka_from_args(args))
        try:
            if args.checkpoint:
                progress = checkpoint_lag(admin, args.checkpoint)
            else:
                progress = group_lag(admin, args.group or enricher_group())
        except (KafkaException, CheckpointError, OffsetsError) as exc:
            lag_error = str(exc)
    result = assess(
        deployments,
        pods,
        spark_apps,
        lag_threshold=args.lag_threshold,
        progress=progress,
        lag_error=lag_error,
    )
    emit(result.checks, ["component", "ok", "detail"], args.json)
    return 0 if result.healthy else 1
