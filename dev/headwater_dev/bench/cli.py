"""``headwater bench``: every benchmark (ingest, gateway, enricher, faults); none in production.

They print figures and ratios against ceilings measured in the same run. The ingest and
gateway benchmarks live in this package; ``enricher`` runs its sub-package
``headwater_dev.bench.enricher`` with its own arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from headwater.ingest.settings import PRODUCERS
from headwater.runtime.signals import interrupt_on_stop
from headwater_dev.bench.connectors.options import ConnectorsOptions, SoakOptions
from headwater_dev.bench.faults.options import FaultsOptions


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``bench`` command group."""
    group = subparsers.add_parser(
        "bench",
        help="benchmarks",
        description="Benchmarks that print numbers and ratios against ceilings measured in "
        "the same run.",
    )
    commands = group.add_subparsers(dest="bench_command", required=True, metavar="COMMAND")
    cmds = commands.add_parser(
        "commands",
        help="time from writing a command to its gateway storing it, and the replica cost",
        description=(
            "Start the embedded broker (or use --bootstrap) and the ingest server in its own "
            "process, connect gateway clients from this one and write commands open loop. "
            "Prints p50/p99 from created_time to: stored in the gateway's spool, DELIVERED "
            "and EXECUTED written to command-status.v1; the ingest process's CPU per 1,000 "
            "commands; a fresh replica's catch-up; and a 10,000-device book's memory. "
            "See docs/benchmarks.md, Commands."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    cmds.add_argument("--rate", type=float, default=1000.0, help="commands per second")
    cmds.add_argument("--seconds", type=float, default=30.0, help="how long to write")
    cmds.add_argument("--devices", type=int, default=1000, help="devices, round robin")
    cmds.add_argument("--gateways", type=int, default=10, help="gateways sharing the devices")
    cmds.add_argument("--bootstrap", help="an existing broker instead of the embedded one")
    cmds.add_argument(
        "--offline-seconds",
        type=float,
        default=0.0,
        help="then write commands this long with no gateway connected (every fifth expiring "
        "meanwhile), reconnect the gateways and check order, expiry and loss (0: skip)",
    )
    cmds.add_argument(
        "--offline-rate", type=float, default=10.0, help="commands per second while away"
    )
    cmds.set_defaults(func=_commands)
    ingest = commands.add_parser(
        "ingest",
        help="the ingest path against a bare gRPC echo and the raw Kafka producers",
        description=(
            "Start the embedded broker (or use --bootstrap), the ingest server and a bare "
            "grpc.aio echo server, each in its own process, and drive them from this one. "
            "Per payload size: ceilings (echo RPC, raw aiokafka and confluent-kafka producers "
            "on the same records), then ingest single-message calls, batch calls and "
            "bidirectional streams. Prints msgs/s, MB/s (payload bytes), p50/p99 per call or "
            "frame, the server's peak RSS, the CPU each process (load generator, broker "
            "when embedded, echo server, ingest server) spent per message in each scenario, "
            "ratios to the ceilings, each target met or missed, and the ingest server's CPU "
            "per single call against the echo server's. With --overload-seconds N the same "
            "run then does the overload checks: measure capacity, offer 2x and 10x it open loop "
            "for N s each (RSS growth, share of refusals that are RESOURCE_EXHAUSTED, "
            "goodput, time to OK after the load), then "
            "the noisy neighbour: nine gateways at half their quota, alone and beside one "
            "at 10x its quota (goodput kept, p99 rise)."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    ingest.add_argument(
        "--messages", type=int, default=100_000, help="at most this many messages per scenario"
    )
    ingest.add_argument(
        "--duration", type=float, default=10.0, help="at most this many seconds per scenario"
    )
    ingest.add_argument(
        "--payload-sizes", default="200,1024", help="comma-separated payload sizes in bytes"
    )
    ingest.add_argument("--single-callers", type=int, default=64, help="concurrent single callers")
    ingest.add_argument("--batch-size", type=int, default=100, help="messages per batch / frame")
    ingest.add_argument("--batch-callers", type=int, default=4, help="concurrent batch callers")
    ingest.add_argument("--streams", type=int, default=4, help="concurrent streams")
    ingest.add_argument(
        "--writer",
        choices=PRODUCERS,
        default=PRODUCERS[0],
        help="the server's produce client (HEADWATER_INGEST_PRODUCER)",
    )
    ingest.add_argument(
        "--overload-seconds",
        type=float,
        default=0.0,
        help="after the scenarios, the overload checks: 2x and 10x capacity this long "
        "each (largest payload size), then the noisy neighbour (at most 20 s per phase)",
    )
    ingest.add_argument("--bootstrap", help="use this Kafka instead of the embedded broker")
    ingest.add_argument(
        "--json", action="store_true", help="also print the whole report as one JSON line, last"
    )
    ingest.set_defaults(func=_ingest)
    gateway = commands.add_parser(
        "gateway",
        help="the gateway's durable spool against direct calls",
        description=(
            "Start the embedded broker (or use --bootstrap) and the ingest server, then send "
            "the same records directly (frames built in memory, one stream, window 4) and "
            "through the gateway client's SQLite spool, and time the spool's enqueue alone "
            "(per message and in batches, synchronous=FULL and NORMAL). Prints msgs/s and "
            "spooled / direct."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    gateway.add_argument("--messages", type=int, default=50_000, help="messages per scenario")
    gateway.add_argument("--payload", type=int, default=200, help="payload bytes")
    gateway.add_argument("--frame", type=int, default=100, help="messages per frame and batch")
    gateway.add_argument("--bootstrap", help="use this Kafka instead of the embedded broker")
    gateway.add_argument("--json", action="store_true", help="print the report as JSON")
    gateway.set_defaults(func=_gateway)
    connectors = commands.add_parser(
        "gateway-connectors",
        help="each gateway connector from the edge to acknowledged by ingest, one core",
        description=(
            "Start the embedded broker (or use --bootstrap) and the ingest server, then one "
            "`headwater gateway run` process per connector, pinned to one CPU (taskset), "
            "against a real source on loopback: QoS 1 JSON messages through Mosquitto from "
            "publisher processes, data changes of asyncua's server in its own process (every "
            "item written in rounds), pymodbus's server "
            "polled. Prints values/s from the edge to acknowledged by ingest, the gateway's "
            "CPU per value, the Modbus poll lateness p50/p99, whether every value was "
            "acknowledged, and issue 39's targets met or missed. See docs/benchmarks.md."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    defaults = ConnectorsOptions()
    for flag, default, text in (
        ("--mqtt-values", defaults.mqtt_values, "MQTT messages (one value each) to publish"),
        ("--mqtt-publishers", defaults.mqtt_publishers, "MQTT publisher processes sharing them"),
        ("--opcua-items", defaults.opcua_items, "OPC UA monitored items"),
        ("--opcua-values", defaults.opcua_values, "OPC UA data changes to write"),
        ("--modbus-registers", defaults.modbus_registers, "Modbus holding registers per poll"),
        ("--modbus-polls", defaults.modbus_polls, "Modbus polls to time"),
    ):
        connectors.add_argument(flag, type=_positive, default=default, help=text)
    connectors.add_argument(
        "--opcua-rate",
        type=_positive_float,
        default=defaults.opcua_rate,
        help="OPC UA data changes offered per second (in rounds over every item)",
    )
    connectors.add_argument(
        "--modbus-interval",
        type=_positive_float,
        default=defaults.modbus_interval_s,
        help="seconds between Modbus polls",
    )
    connectors.add_argument(
        "--phase-timeout",
        type=_positive_float,
        default=defaults.phase_timeout_s,
        help="at most this many seconds per phase once its load is offered",
    )
    connectors.add_argument(
        "--cpu", type=int, help="the gateway's CPU (default: the highest this process may use)"
    )
    connectors.add_argument("--bootstrap", help="use this Kafka instead of the embedded broker")
    connectors.add_argument(
        "--json", action="store_true", help="also print the whole report as one JSON line, last"
    )
    connectors.set_defaults(func=_gateway_connectors)
    _register_soak(commands)
    _register_faults(commands)
    enricher = commands.add_parser(
        "enricher",
        help="the enricher's throughput and latency on local Spark, and its keyed-state floor",
        description=(
            "The enricher benchmark (headwater_dev.bench.enricher): every argument is its own; "
            "`headwater bench enricher --help` lists them."
        ),
        add_help=False,  # --help goes to the enricher benchmark's own parser
    )
    enricher.set_defaults(func=_enricher, forward_args=True)


def _register_soak(commands: argparse._SubParsersAction) -> None:
    soak = commands.add_parser(
        "gateway-soak",
        help="the gateway process's RSS over a steady load of every connector",
        description=(
            "Start the embedded broker (or use --bootstrap) and the ingest server, then one "
            "`headwater gateway run` process, pinned to one CPU (taskset), with the MQTT, "
            "OPC UA and Modbus connectors at once against real sources on loopback: QoS 1 "
            "JSON messages through Mosquitto at --mqtt-rate, data changes of asyncua's server "
            "(its own process) at --opcua-rate, pymodbus's server polled. Samples the "
            "gateway's RSS every --sample-every seconds for --seconds, then stops the sources "
            "and waits until ingest acknowledged every value. Prints the RSS figures against "
            "issue 39's bound (flat within 10 MB either side after the warm-up) and the "
            "gateway's CPU. See docs/benchmarks.md, Gateway: memory soak."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    defaults = SoakOptions()
    for flag, default, text in (
        ("--seconds", defaults.seconds, "how long the load runs (and RSS is sampled)"),
        ("--mqtt-rate", defaults.mqtt_rate, "MQTT values (QoS 1 messages) per second"),
        ("--opcua-rate", defaults.opcua_rate, "OPC UA data changes per second"),
        ("--modbus-interval", defaults.modbus_interval_s, "seconds between Modbus polls"),
        ("--sample-every", defaults.sample_every_s, "seconds between RSS samples"),
        ("--warmup", defaults.warmup_s, "seconds of start-up before RSS is judged"),
        ("--drain-timeout", defaults.drain_timeout_s, "longest wait for the last acks"),
    ):
        soak.add_argument(flag, type=_positive_float, default=default, help=text)
    for flag, default, text in (
        ("--opcua-items", defaults.opcua_items, "OPC UA monitored items"),
        ("--modbus-registers", defaults.modbus_registers, "Modbus holding registers per poll"),
    ):
        soak.add_argument(flag, type=_positive, default=default, help=text)
    soak.add_argument(
        "--cpu", type=int, help="the gateway's CPU (default: the highest this process may use)"
    )
    soak.add_argument("--bootstrap", help="use this Kafka instead of the embedded broker")
    soak.add_argument(
        "--json", action="store_true", help="also print the whole report as one JSON line, last"
    )
    soak.set_defaults(func=_gateway_soak)


def _register_faults(commands: argparse._SubParsersAction) -> None:
    faults = commands.add_parser(
        "faults",
        help="a leader killed and a rolling restart on a 3-node cluster, through the gateway",
        description=(
            "Start a three-node Apache Kafka cluster on loopback (RF 3, min.insync.replicas=2) "
            "and the ingest server in its own process, spool --rate readings per second "
            "through the gateway library, and provoke two faults in turn: the node leading "
            "the telemetry topic's partition 0 SIGKILLed (the election from the metadata, the "
            "longest time with no OK on its partitions, the first OK after the kill), then "
            "every node SIGTERMed and started again in turn, the next once all is in sync "
            "(goodput over the roll against the same time without faults). Every OK is read "
            "back from Kafka. Prints the load average at start and end, the rate offered and "
            "carried, and issue 36's targets met or MISSED. Stops everything it started, on "
            "Ctrl-C too. See docs/benchmarks.md, Faults on a three-node cluster."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    defaults = FaultsOptions()
    faults.add_argument(
        "--rate", type=_positive_float, default=defaults.rate, help="readings spooled per second"
    )
    faults.add_argument("--payload", type=_positive, default=defaults.payload, help="payload bytes")
    faults.add_argument(
        "--steady-seconds",
        type=_positive_float,
        default=defaults.steady_s,
        help="load before each fault, and after the first OK once the leader was killed",
    )
    faults.add_argument(
        "--seconds",
        type=_positive_float,
        default=defaults.seconds,
        help="the longest wait for the kill to pass (a new leader, then an OK on its "
        "partitions) and the longest calm window (as long as the roll, at most this)",
    )
    faults.add_argument(
        "--json", action="store_true", help="also print the whole report as one JSON line, last"
    )
    faults.set_defaults(func=_faults)


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and value.is_integer() and abs(value) >= 100:
        return f"{int(value):,}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def render(rows: list[dict[str, Any]], columns: list[tuple[str, str]]) -> str:
    """A plain-text table of ``rows`` with (key, heading) columns."""
    cells = [[_fmt(r.get(k)) for k, _ in columns] for r in rows]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, (_, h) in enumerate(columns)]
    lines = ["  ".join(h.ljust(w) for (_, h), w in zip(columns, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(c, widths, strict=True)) for c in cells]
    return "\n".join(lines)


def _grpc(grpc: dict[str, Any]) -> str:
    experiments = grpc["experiments"]
    return grpc["version"] + (f" (GRPC_EXPERIMENTS={experiments})" if experiments else "")


def print_report(report: dict[str, Any]) -> None:
    """Print the report as tables."""
    from headwater_dev.bench.report import cpu_cell, machine_line

    print(
        f"{machine_line(report)}; server writer: {report['options']['writer']}; "
        f"gRPC {_grpc(report['grpc'])}"
    )
    if report["results"]:
        results = [{**r, "cpu": cpu_cell(r.get("cpu_us_per_msg"))} for r in report["results"]]
        print()
        print(
            render(
                results,
                [
                    ("scenario", "scenario"),
                    ("payload", "payload B"),
                    ("messages", "msgs"),
                    ("msgs_per_s", "msgs/s"),
                    ("mb_per_s", "MB/s"),
                    ("p50_ms", "p50 ms"),
                    ("p99_ms", "p99 ms"),
                    ("failed", "failed"),
                    ("server_peak_rss_mb", "server peak RSS MB"),
                    ("cpu", "CPU µs/msg: load gen / broker / echo / server"),
                ],
            )
        )
    if "overload" in report:
        o = report["overload"]
        print()
        print(
            f"overload: capacity {o['capacity_msgs_per_s']:,} msgs/s (batch calls of "
            f"{report['options']['batch_size']} x {o['payload']} B, {o['capacity_callers']} "
            f"closed-loop callers, measured in this run); server CPU "
            f"{o['server_cpu_ms_per_ok_call']} ms per call at capacity"
        )
        for w in o["windows"]:
            print(
                f"  {w['factor']:g}x: offered {w['offered_msgs_per_s']:,} msgs/s open loop for "
                f"{o['seconds']:g} s from {w['load_processes']} processes; answers "
                f"{w['codes']}, not sent (client cap) {w['not_sent']}, client at most "
                f"{w['client_most_behind_s']} s behind its clock; goodput "
                f"{w['goodput_msgs_per_s']:,} msgs/s "
                f"({w['goodput_vs_capacity']:.0%} of capacity), OK p99 {w['ok_p99_ms']} ms"
            )
            print(
                f"      server RSS {w['rss_before_mb']} MB before, peak in window "
                f"{w['rss_before_mb'] + w['rss_growth_mb']:.1f} MB (growth "
                f"{w['rss_growth_mb']} MB), {w['rss_end_of_window_mb']} MB at its end, "
                f"{w['rss_after_drain_mb']} MB after the last answer; OK again "
                f"{w['answers_ok_after_s']} s after the load stopped; server CPU "
                f"{w['server_cpu_share']} cores, ~{w['server_cpu_ms_per_refusal']} ms per "
                "refusal it answered itself"
            )
            print("      RSS series (s, MB):", w["rss_series_mb"])
        nb = o["neighbour"]
        print(
            f"  noisy neighbour ({nb['seconds']:g} s per phase): quota "
            f"{nb['quota_msgs_per_s']:,} msgs/s per gateway; nine offer "
            f"{nb['polite_offered_msgs_per_s']:,} msgs/s in all, one offers "
            f"{nb['noisy_offered_msgs_per_s']:,}"
        )
        for phase in ("alone", "beside_noisy"):
            p = nb[phase]
            print(
                f"      {phase}: nine's goodput {p['polite_goodput_msgs_per_s']:,} msgs/s, "
                f"p99 {p['polite_p99_ms']} ms, answers {p['polite_codes']}"
                + (f"; noisy answers {p['noisy_codes']}" if "noisy_codes" in p else "")
            )
    print()
    print(
        render(
            report["targets"],
            [
                ("payload", "payload B"),
                ("target", "target"),
                ("value", "value"),
                ("verdict", "verdict"),
            ],
        )
    )


def _ingest(args: argparse.Namespace) -> int:
    interrupt_on_stop()  # a bench stops on Ctrl-C/SIGTERM however it was launched
    from headwater_dev.bench.ingest_bench import BenchOptions, run_benchmark

    opts = BenchOptions(
        messages=args.messages,
        duration_s=args.duration,
        payload_sizes=tuple(int(s) for s in args.payload_sizes.split(",")),
        single_callers=args.single_callers,
        batch_size=args.batch_size,
        batch_callers=args.batch_callers,
        streams=args.streams,
        writer=args.writer,
        overload_seconds=args.overload_seconds,
    )
    report = asyncio.run(run_benchmark(opts, args.bootstrap))
    print_report(report)
    if args.json:
        print(json.dumps(report, separators=(",", ":")))
    return 0


def _gateway(args: argparse.Namespace) -> int:
    interrupt_on_stop()  # a bench stops on Ctrl-C/SIGTERM however it was launched
    from headwater_dev.bench.gateway_bench import run_gateway_benchmark

    report = asyncio.run(
        run_gateway_benchmark(args.messages, args.payload, args.frame, args.bootstrap)
    )
    if args.json:
        print(json.dumps(report, separators=(",", ":")))
        return 0
    m = report["machine_at_start"]
    print(f"machine: {m}")
    rows = [{"scenario": k, "msgs_per_s": v} for k, v in report["msgs_per_s"].items()]
    print(render(rows, [("scenario", "scenario"), ("msgs_per_s", "msgs/s")]))
    print(f"spooled / direct: {report['spooled_vs_direct']:.0%}")
    return 0


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive count")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number")
    return value


def _gateway_connectors(args: argparse.Namespace) -> int:
    interrupt_on_stop()  # a bench stops on Ctrl-C/SIGTERM however it was launched
    from headwater_dev.bench.connectors.report import print_report as print_connectors
    from headwater_dev.bench.connectors.run import run_connectors_benchmark

    opts = ConnectorsOptions(
        mqtt_values=args.mqtt_values,
        mqtt_publishers=args.mqtt_publishers,
        opcua_items=args.opcua_items,
        opcua_values=args.opcua_values,
        opcua_rate=args.opcua_rate,
        modbus_registers=args.modbus_registers,
        modbus_polls=args.modbus_polls,
        modbus_interval_s=args.modbus_interval,
        phase_timeout_s=args.phase_timeout,
        cpu=args.cpu,
    )
    report = asyncio.run(run_connectors_benchmark(opts, args.bootstrap))
    print_connectors(report)
    if args.json:
        print(json.dumps(report, separators=(",", ":")))
    return 0


def _gateway_soak(args: argparse.Namespace) -> int:
    interrupt_on_stop()  # a bench stops on Ctrl-C/SIGTERM however it was launched
    from headwater_dev.bench.connectors.soak import print_report as print_soak
    from headwater_dev.bench.connectors.soak import run_soak

    opts = SoakOptions(
        seconds=args.seconds,
        mqtt_rate=args.mqtt_rate,
        opcua_items=args.opcua_items,
        opcua_rate=args.opcua_rate,
        modbus_registers=args.modbus_registers,
        modbus_interval_s=args.modbus_interval,
        sample_every_s=args.sample_every,
        warmup_s=args.warmup,
        drain_timeout_s=args.drain_timeout,
        cpu=args.cpu,
    )
    report = asyncio.run(run_soak(opts, args.bootstrap))
    print_soak(report)
    if args.json:
        print(json.dumps(report, separators=(",", ":")))
    return 0


def _faults(args: argparse.Namespace) -> int:
    interrupt_on_stop()  # a bench stops on Ctrl-C/SIGTERM however it was launched
    from headwater.runtime.logs import configure_logging
    from headwater_dev.bench.faults.report import print_report as print_faults
    from headwater_dev.bench.faults.run import run_faults_benchmark

    # The gateway library's warnings (calls failed during a fault) as JSON on stderr, like
    # every other process's; the report goes to stdout.
    configure_logging("WARNING")
    opts = FaultsOptions(args.rate, args.payload, args.steady_seconds, args.seconds)
    report = run_faults_benchmark(opts)
    print_faults(report)
    if args.json:
        print(json.dumps(report, separators=(",", ":")))
    return 0


def _enricher(args: argparse.Namespace) -> int:
    interrupt_on_stop()  # a bench stops on Ctrl-C/SIGTERM however it was launched
    from headwater_dev.bench.enricher.query import main

    return main(list(args.forwarded))


def _commands(args: argparse.Namespace) -> int:
    interrupt_on_stop()  # a bench stops on Ctrl-C/SIGTERM however it was launched
    from headwater_dev.bench.command_bench import main_cli

    return main_cli(args)
