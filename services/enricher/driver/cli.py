"""``headwater enricher run``: the enricher's streaming job from the command line.

Only argparse at import time: pyspark is imported when the command runs, so
``headwater --help`` stays fast.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

_FLAGS: tuple[tuple[str, str, Any, str], ...] = (
    ("--checkpoint-location", "checkpoint_location", str, "HEADWATER_ENRICHER_CHECKPOINT_LOCATION"),
    ("--starting-offsets", "starting_offsets", str, "HEADWATER_ENRICHER_STARTING_OFFSETS"),
    (
        "--max-records-per-trigger",
        "max_records_per_trigger",
        int,
        "HEADWATER_ENRICHER_MAX_RECORDS_PER_TRIGGER",
    ),
    ("--trigger-interval", "trigger_interval_seconds", str, "HEADWATER_ENRICHER_TRIGGER_INTERVAL"),
    ("--max-attempts", "max_attempts", int, "HEADWATER_ENRICHER_MAX_ATTEMPTS"),
    ("--dedup-window", "dedup_window_seconds", str, "HEADWATER_ENRICHER_DEDUP_WINDOW"),
    ("--topic-prefix", "topic_prefix", str, "HEADWATER_ENRICHER_TOPIC_PREFIX"),
)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``enricher`` command group."""
    from headwater.enricher.driver.settings import EnricherSettings
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
            "Run the enricher. Settings come from the environment variables below "
            "(docs/enricher.md explains each); flags override them; the standard OTEL_* "
            "variables configure telemetry. Needs Java 17 (JAVA_HOME or PATH). On exit one "
            "JSON summary line is printed to stdout; exits 2 with one line on stderr when it "
            "cannot start (a bad setting, no Java)."
        ),
        epilog=env_help(EnricherSettings.from_env, extra={"HEADWATER_LOG_LEVEL": "INFO"}),
        formatter_class=EnvHelpFormatter,
    )
    run.add_argument(
        "--bootstrap-servers", help="Kafka bootstrap servers (HEADWATER_KAFKA_BOOTSTRAP_SERVERS)"
    )
    for flag, _field, kind, env in _FLAGS:
        run.add_argument(flag, type=kind, help=f"overrides {env}")
    run.add_argument(
        "--max-seconds",
        type=float,
        default=0.0,
        help="stop by itself after N seconds (0: run until stopped)",
    )
    run.set_defaults(func=_run)


def settings_from_args(args: argparse.Namespace, env: dict[str, str] | None = None) -> Any:
    """Return EnricherSettings from the environment with the flags given applied on top."""
    import os

    from headwater.enricher.driver.settings import EnricherSettings

    merged = dict(os.environ if env is None else env)
    if args.bootstrap_servers:
        merged["HEADWATER_KAFKA_BOOTSTRAP_SERVERS"] = args.bootstrap_servers
    for flag, _field, _kind, name in _FLAGS:
        value = getattr(args, flag.lstrip("-").replace("-", "_"), None)
        if value is not None:
            merged[name] = str(value)
    return EnricherSettings.from_env(merged)


def _run(args: argparse.Namespace) -> int:
    from headwater.runtime.logs import configure_logging
    from headwater.runtime.startup import require_java

    configure_logging()
    # SettingError and StartupError end in one line on stderr (headwater.cli.main).
    settings = settings_from_args(args)
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
