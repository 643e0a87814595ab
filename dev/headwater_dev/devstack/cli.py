"""``headwater devstack``: the whole pipeline on one machine.

``run`` is the bounded demo (``make run``); ``up``, ``status`` and ``down`` keep a stack
running in the background; ``serve`` is that stack in the foreground; ``watch`` prints
what arrives on the topics.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import TYPE_CHECKING

from headwater.kafka.options import add_kafka_options
from headwater.runtime.signals import interrupt_on_stop
from headwater_dev.devstack.run_faults import FAULTS, ROLL_DURATION_S

if TYPE_CHECKING:
    from headwater_dev.devstack.processes import Ports

#: Default loopback ports of ``up`` and ``serve`` (the services' usual ports).
DEFAULT_PORTS = {"kafka": 9092, "grpc": 50051, "ingest_metrics": 9464, "enricher_metrics": 9465}


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``devstack`` command group."""
    group = subparsers.add_parser(
        "devstack",
        help="run the whole pipeline locally with a simulated fleet",
        description="The dev stack: embedded broker, ingest, enricher and a simulated fleet.",
    )
    commands = group.add_subparsers(dest="devstack_command", required=True, metavar="COMMAND")
    run = commands.add_parser(
        "run",
        help="run for a bounded time and print a summary",
        description=(
            "Start the embedded broker (Apache Kafka) on loopback, create the topics, start the "
            "ingest service and the enricher, drive a simulated fleet of gateways for "
            "--duration seconds, then read every topic back and print a summary. Exits 1 "
            "if any acknowledged message is missing from Kafka. The broker's data and the "
            "enricher's checkpoint are temporary (removed at the end); logs and the summary "
            "stay in --workdir, which is wiped at the start and is apart from `up`'s folder."
        ),
    )
    run.add_argument(
        "--duration",
        type=float,
        help=f"seconds of fleet traffic (default 60; {ROLL_DURATION_S:g} with --chaos roll)",
    )
    run.add_argument("--rate", type=float, default=500.0, help="messages per second, in total")
    run.add_argument("--gateways", type=int, default=8, help="simulated gateways (+1 rogue)")
    run.add_argument("--devices", type=int, default=25, help="devices per gateway")
    run.add_argument("--no-enricher", action="store_true", help="run the ingest path only")
    run.add_argument(
        "--enricher-drain",
        type=float,
        default=120.0,
        help="seconds to wait for the enricher to complete every message after traffic stops",
    )
    run.add_argument(
        "--workdir",
        type=Path,
        default=Path(".devstack/run"),
        help="logs and summary (default %(default)s)",
    )
    run.add_argument(
        "--warmup",
        type=float,
        default=20.0,
        help="seconds of traffic at the start left out of the end-to-end latency (Spark "
        "compiles the query's code in them); none when --duration is under twice this",
    )
    run.add_argument("--json", action="store_true", help="print the summary as one JSON line")
    run.add_argument(
        "--connectors",
        action="store_true",
        help="also one device of each gateway connector (MQTT through Mosquitto when "
        "installed, asyncua's OPC UA server, pymodbus's Modbus server) behind one "
        "`headwater gateway run`; the summary shows each connector",
    )
    _brokers_argument(run)
    run.add_argument(
        "--chaos",
        nargs="?",
        const="leader",
        choices=FAULTS,
        help="a Kafka fault mid-run, shown in the summary with when the end-to-end p99 was back "
        "under 2 s; every guarantee must still PASS (needs --brokers 3). leader (plain "
        "--chaos): SIGKILL the node leading the telemetry topic halfway through and start it "
        "again; roll: 10 s after the warm-up, restart every node in turn (SIGTERM, the next once "
        "all is in sync), as an upgrade does: it takes a minute or more, so --duration "
        f"defaults to {ROLL_DURATION_S:g} s with it",
    )
    _spark_workers_argument(run)
    run.set_defaults(func=_run)

    up = commands.add_parser(
        "up",
        help="start the stack in the background and print how to use it",
        description=(
            "Start the Kafka broker, the topics, the ingest service and the enricher on "
            "loopback, owned by a detached supervisor process that survives the terminal "
            "closing; wait until they are up and print the gRPC address, a bearer token, the "
            "Kafka bootstrap address, the metrics URLs and a buf curl call that publishes a "
            "message. Up means the enricher completed a micro-batch. Logs, data, the enricher's "
            "checkpoint and state stay in --workdir (a checkpoint written against other broker "
            "data is refused, with what to do); `headwater devstack down` stops it. Exits 1 if "
            "it does not come up, with the reason and the last lines of the failing part's log."
        ),
    )
    _stack_arguments(up)
    up.add_argument(
        "--wait",
        type=float,
        default=360.0,
        help="seconds to wait for the stack to come up (default %(default)s)",
    )
    up.add_argument("--json", action="store_true", help="print the connection facts as JSON")
    up.set_defaults(func=_up)

    serve = commands.add_parser(
        "serve",
        help="run the stack in the foreground until SIGTERM or Ctrl-C (what up runs)",
        description=(
            "Run the supervisor that `up` starts in the background, in the foreground: start "
            "the broker, topics, ingest and enricher, keep them running, and stop them "
            "cleanly (enricher, then ingest draining, then the broker) on SIGTERM or Ctrl-C."
        ),
    )
    _stack_arguments(serve)
    serve.set_defaults(func=_serve)

    status = commands.add_parser(
        "status",
        help="say what of a background stack is up",
        description=(
            "Check each piece of the stack in --workdir (broker reachable, ingest health "
            "SERVING, enricher metrics answering), say why a piece exited (how, and its log's "
            "last lines) and print how to use it. Exits 0 when everything is up, 1 when no "
            "stack runs, 2 when a piece is not up."
        ),
    )
    status.add_argument("--workdir", type=Path, default=Path(".devstack"), help="its folder")
    status.add_argument("--json", action="store_true", help="print the facts as JSON")
    status.set_defaults(func=_status)

    down = commands.add_parser(
        "down",
        help="stop a background stack cleanly",
        description=(
            "Send SIGTERM to the stack's supervisor, which stops the enricher, drains the "
            "ingest service and stops the broker; wait at most --timeout seconds, then kill "
            "what is left. Logs and data stay in --workdir. Exits 1 if it had to kill."
        ),
    )
    down.add_argument("--workdir", type=Path, default=Path(".devstack"), help="its folder")
    down.add_argument(
        "--timeout", type=float, default=150.0, help="seconds to wait (default %(default)s)"
    )
    down.set_defaults(func=_down)

    watch = commands.add_parser(
        "watch",
        help="print records of Headwater topics as they arrive, decoded, as JSON lines",
        description=(
            "Follow topics (by default the event topics, completions.v1 and deadletter.v1) "
            "and print each new record as one JSON line, its value decoded with the topic's "
            "message type. Uses no consumer group. Stops on Ctrl-C or at a bound."
        ),
    )
    watch.add_argument("--workdir", type=Path, default=Path(".devstack"), help="the stack's folder")
    # A Kafka left out is the stack's in --workdir when one runs there, else the variables'.
    add_kafka_options(watch)
    watch.add_argument(
        "--topic", action="append", dest="topics", help="a topic to follow (repeatable)"
    )
    watch.add_argument(
        "--from-beginning", action="store_true", help="start at the oldest record, not new ones"
    )
    watch.add_argument("--max-records", type=int, help="stop after this many records")
    watch.add_argument("--max-seconds", type=float, help="stop after this many seconds")
    watch.set_defaults(func=_watch)


def _stack_arguments(parser: argparse.ArgumentParser) -> None:
    """The folder, ports and enricher switch shared by ``up`` and ``serve``."""
    parser.add_argument(
        "--workdir", type=Path, default=Path(".devstack"), help="logs, data and state"
    )
    for name, port in DEFAULT_PORTS.items():
        flag = "--" + name.replace("_", "-") + "-port"
        parser.add_argument(
            flag, type=int, default=port, dest=f"{name}_port", help=f"default {port}"
        )
    parser.add_argument(
        "--no-enricher", action="store_true", help="run broker and ingest only (no Spark)"
    )
    _brokers_argument(parser)
    _spark_workers_argument(parser)


def _spark_workers_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--spark-workers",
        type=_spark_workers,
        default=0,
        help="run the enricher on a Spark standalone cluster on loopback: a master and N "
        "workers of one core each, executors of 512 MB (default 0: Spark's local mode); "
        "`headwater chaos kill-executor` loses one of its executors",
    )


def _brokers_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--brokers",
        type=_broker_count,
        default=1,
        help="Kafka nodes: 1 (default), or 3 (5, 7, 9) for a cluster with production's "
        "replication: 3 replicas, min.insync.replicas=2, unclean election off; nodes on the "
        "Kafka port and the next ones. Each node costs the memory of one broker.",
    )


def _broker_count(text: str) -> int:
    # An even quorum survives no more losses than the odd one below it, at more cost.
    if not text.isdigit() or not (text == "1" or (int(text) % 2 == 1 and 3 <= int(text) <= 9)):
        raise argparse.ArgumentTypeError(f"1, or an odd number from 3 to 9, not {text!r}")
    return int(text)


def _spark_workers(text: str) -> int:
    # Each worker is a JVM with an executor JVM and its Python workers beside it.
    if not text.isdigit() or int(text) > 4:
        raise argparse.ArgumentTypeError(f"a number of workers from 0 to 4, not {text!r}")
    return int(text)


def _ports(args: argparse.Namespace) -> Ports:
    from headwater_dev.devstack.processes import Ports

    return Ports(
        args.kafka_port, args.grpc_port, args.ingest_metrics_port, args.enricher_metrics_port
    )


def _preflight(with_enricher: bool) -> None:
    """Fail at once, in one line, when Java or the jars are missing (not in a child's log)."""
    from headwater.runtime import jvm
    from headwater.runtime.startup import require_java

    require_java("the dev stack (Apache Kafka" + (", Spark)" if with_enricher else ")"))
    jvm.jars(jvm.KAFKA_BROKER)  # JvmSetupError says how to install them


def _up(args: argparse.Namespace) -> int:
    from headwater_dev.devstack.background import up

    _preflight(not args.no_enricher)
    interrupt_on_stop()
    try:
        return up(
            args.workdir,
            _ports(args),
            not args.no_enricher,
            args.wait,
            args.json,
            args.brokers,
            args.spark_workers,
        )
    except KeyboardInterrupt:  # the supervisor is detached: only the waiting stops
        print("stopped waiting; the stack goes on in the background (`status`, `down`)")
        return 130


def _serve(args: argparse.Namespace) -> int:
    from headwater.runtime.logs import configure_logging
    from headwater_dev.devstack.supervisor import StackOptions, Supervisor

    configure_logging()
    _preflight(not args.no_enricher)
    opts = StackOptions(
        args.workdir, _ports(args), not args.no_enricher, args.brokers, args.spark_workers
    )
    return asyncio.run(Supervisor(opts).run())


def _status(args: argparse.Namespace) -> int:
    from headwater_dev.devstack.background import status

    return status(args.workdir, args.json)


def _down(args: argparse.Namespace) -> int:
    from headwater_dev.devstack.background import down

    return down(args.workdir, args.timeout)


def _watch(args: argparse.Namespace) -> int:
    import dataclasses

    from headwater.kafka.options import kafka_from_args
    from headwater_dev.devstack import status_file
    from headwater_dev.devstack.watch import DEFAULT_TOPICS, watch

    kafka = kafka_from_args(args)
    running = None if args.bootstrap_servers else status_file.read(args.workdir.resolve())
    if running:
        kafka = dataclasses.replace(kafka, bootstrap_servers=running.bootstrap_servers)
    return watch(
        kafka,
        args.topics or DEFAULT_TOPICS,
        args.from_beginning,
        args.max_records,
        args.max_seconds,
    )


def _run(args: argparse.Namespace) -> int:
    from headwater.runtime.logs import configure_logging
    from headwater_dev.devstack.stack import DevStackOptions, run_devstack
    from headwater_dev.devstack.status_file import StackRunningError
    from headwater_dev.devstack.summary import guarantees

    configure_logging("WARNING")
    if args.chaos and args.brokers < 3:
        print(
            f"--chaos {args.chaos} fails brokers: it needs a cluster that survives it, --brokers 3"
        )
        return 2
    if args.warmup < 0:
        print(f"--warmup {args.warmup:g}: use 0 (none) or more seconds")
        return 2
    _preflight(not args.no_enricher)
    duration = args.duration
    if duration is None:
        duration = ROLL_DURATION_S if args.chaos == "roll" else 60.0
    opts = DevStackOptions(
        duration_s=duration,
        rate=args.rate,
        gateways=args.gateways,
        devices_per_gateway=args.devices,
        with_enricher=not args.no_enricher,
        enricher_drain_s=args.enricher_drain,
        workdir=args.workdir,
        json_output=args.json,
        brokers=args.brokers,
        chaos=args.chaos,
        spark_workers=args.spark_workers,
        warmup_s=args.warmup,
        connectors=args.connectors,
    )
    interrupt_on_stop()  # the run's finally blocks stop what it started
    try:
        summary = asyncio.run(run_devstack(opts))
    except StackRunningError as exc:
        print(exc)
        return 1
    return 0 if all(g.ok for g in guarantees(summary)) else 1
