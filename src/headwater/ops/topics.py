"""``headwater topics``: create or verify every topic from its declarative description."""

from __future__ import annotations

import argparse
import json

from headwater.kafka.options import add_kafka_options, kafka_from_args


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``topics`` command group."""
    group = subparsers.add_parser(
        "topics",
        help="create or verify Headwater's topics",
        description="Create or verify every topic described in headwater.topics.",
    )
    commands = group.add_subparsers(dest="topics_command", required=True, metavar="COMMAND")
    ensure = commands.add_parser(
        "ensure",
        help="create missing topics; report drift of existing ones without changing them",
        description=(
            "Create the topics that are missing and report existing topics whose shape "
            "differs from the description. Exits 3 when drift is found."
        ),
    )
    add_kafka_options(ensure)
    ensure.add_argument("--partitions", type=int, default=6, help="partitions per topic")
    ensure.add_argument("--replication-factor", type=int, default=3, help="replicas per partition")
    ensure.add_argument("--json", action="store_true", help="print one JSON object per topic")
    ensure.set_defaults(func=_ensure)


def _ensure(args: argparse.Namespace) -> int:
    from headwater.kafka.admin import ensure_topics
    from headwater.topics import all_topics

    reports = ensure_topics(
        kafka_from_args(args), all_topics(args.partitions, args.replication_factor)
    )
    for report in reports:
        if args.json:
            print(json.dumps(report.__dict__))
        else:
            print(f"{report.action:<8} {report.name:<24} {report.detail}")
    return 3 if any(r.action == "drift" for r in reports) else 0
