"""``headwater enricher run``: the enricher's streaming job from the command line.

Only argparse at import time: pyspark is imported when the command runs, so
``headwater --help`` stays fast.
"""

from __future__ import annotations

import argparse
import json
import time


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``enricher`` command group."""
    from headwater.enricher.driver.settings import EnricherSettings
    from headwater.kafka.options import add_kafka_options
    from headwater.runtime.logs import LogSettings
    from headwater.runtime.startup import EnvHelpFormatter, env_help

    enricher = subparsers.add_parser(
        "enricher",
        help="the Spark enricher: ingest topics -> events, completions, state, dead letters",
        description="The Spark Structured Streaming enricher.",
    )
    commands = enricher.add_subparsers(dest="enricher_command", required=True, metavar="COMMAND")
    run = commands.add_parser(
        "run",
        help="run the streaming query until stopped (SIGTERM/SIGINT) or --max-seconds",
        description=(
            "Run the enricher. Settings come from the flags and the environment variables "
            "below (a flag wins; docs/enricher.md explains each); the standard OTEL_* "
            "variables configure telemetry. Needs Java 17 (JAVA_HOME or PATH). On exit one "
            "JSON summary line is printed to stdout; exits 2 with one line on stderr when it "
            "cannot start (a bad setting, no Java)."
        ),
        epilog=env_help(EnricherSettings.from_env, LogSettings.from_env),
        formatter_class=EnvHelpFormatter,
    )
    EnricherSettings.add_arguments(run)
    add_kafka_options(run, topic_prefix=True)
    run.add_argument(
        "--max-seconds",
        type=float,
        default=0.0,
        help="stop by itself after N seconds (0: run until stopped)",
    )
    run.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from headwater.enricher.driver.settings import EnricherSettings
    from headwater.runtime.logs import configure_logging
    from headwater.runtime.startup import require_java

    configure_logging()
    # SettingError and StartupError end in one line on stderr (headwater.cli.main).
    settings = EnricherSettings.from_args(args)
    # Spark starts its JVM deep inside pyspark, whose failure is a long traceback.
    require_java("the enricher (Spark)")
    from headwater.enricher.driver.runner import run_enricher
    from headwater.enricher.driver.stderr_json import route_stderr_through_json
    from headwater.runtime.signals import stop_event

    route_stderr_through_json()  # Spark's JVM and workers share our stderr: JSON only

    stop = stop_event()  # SIGINT or SIGTERM, whatever was inherited
    deadline = time.monotonic() + args.max_seconds if args.max_seconds else None
    code, summary = run_enricher(settings, stop.is_set, deadline)
    print(json.dumps(summary), flush=True)
    return code
