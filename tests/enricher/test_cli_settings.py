"""Settings from the environment, flags over env, and the CLI contract."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from headwater.enricher.driver.cli import register, settings_from_args
from headwater.enricher.driver.settings import EnricherSettings, parse_duration
from headwater.enricher.errors import StartingOffsetsRequiredError
from headwater.runtime.env import SettingError


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="headwater")
    register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


def test_from_env_reads_every_setting() -> None:
    s = EnricherSettings.from_env(
        {
            "HEADWATER_KAFKA_BOOTSTRAP_SERVERS": "k:9092",
            "HEADWATER_ENRICHER_CHECKPOINT_LOCATION": "s3a://b/cp",
            "HEADWATER_ENRICHER_STARTING_OFFSETS": "Latest",
            "HEADWATER_ENRICHER_MAX_RECORDS_PER_TRIGGER": "500",
            "HEADWATER_ENRICHER_TRIGGER_INTERVAL": "250ms",
            "HEADWATER_ENRICHER_MAX_ATTEMPTS": "7",
            "HEADWATER_ENRICHER_DEDUP_WINDOW": "2h",
            "HEADWATER_ENRICHER_TOPIC_PREFIX": "dev.",
            "HEADWATER_ENRICHER_MAX_PARKED_BYTES": "1000000",
            "HEADWATER_ENRICHER_DRIVER_MEMORY": "3g",
        }
    )
    assert (s.kafka.bootstrap_servers, s.checkpoint_location, s.starting_offsets) == (
        "k:9092",
        "s3a://b/cp",
        "latest",
    )
    assert (s.max_records_per_trigger, s.trigger_interval_seconds) == (500, 0.25)
    assert (s.max_attempts, s.dedup_window_seconds) == (7, 7200.0)
    assert s.topics.completions == "dev.completions.v1"
    assert (s.max_parked_bytes, s.driver_memory) == (1_000_000, "3g")
    with pytest.raises(dataclasses_frozen_error()):
        s.max_attempts = 1  # type: ignore[misc]


def dataclasses_frozen_error() -> type[Exception]:
    import dataclasses

    return dataclasses.FrozenInstanceError


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("HEADWATER_ENRICHER_STARTING_OFFSETS", "newest"),
        ("HEADWATER_ENRICHER_TRIGGER_INTERVAL", "soon"),
        ("HEADWATER_ENRICHER_MAX_ATTEMPTS", "0"),
        ("HEADWATER_ENRICHER_MAX_PARKED_BYTES", "0"),
        ("HEADWATER_ENRICHER_DRIVER_MEMORY", "lots"),
        ("HEADWATER_ENRICHER_DRIVER_MEMORY", "2 GB"),
    ],
)
def test_bad_values_name_the_variable(name: str, value: str) -> None:
    with pytest.raises(SettingError, match=name):
        EnricherSettings.from_env({name: value})


def test_durations() -> None:
    assert parse_duration("X", "1.5") == 1.5
    assert parse_duration("X", "10m") == 600


def test_flags_override_env() -> None:
    args = _parse(
        [
            "enricher",
            "run",
            "--starting-offsets",
            "earliest",
            "--max-attempts",
            "2",
            "--max-seconds",
            "5",
        ]
    )
    s = settings_from_args(
        args,
        {"HEADWATER_ENRICHER_STARTING_OFFSETS": "latest", "HEADWATER_ENRICHER_MAX_ATTEMPTS": "9"},
    )
    assert (s.starting_offsets, s.max_attempts, args.max_seconds) == ("earliest", 2, 5.0)


def test_register_does_not_import_pyspark() -> None:
    code = (
        "import argparse, sys; from headwater.enricher.driver.cli import register; "
        "p = argparse.ArgumentParser(); register(p.add_subparsers()); "
        "assert 'pyspark' not in sys.modules, 'pyspark imported at registration'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_run_help_lists_the_options() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "headwater.enricher", "run", "--help"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    for flag in (
        "--starting-offsets",
        "--max-seconds",
        "--dedup-window",
        "--checkpoint-location",
    ):
        assert flag in out


@pytest.mark.spark
def test_no_checkpoint_and_no_starting_offsets_is_refused(spark, tmp_path) -> None:
    from headwater.enricher.driver.job import read_ingest

    s = EnricherSettings(checkpoint_location=str(tmp_path / "none"))
    with pytest.raises(StartingOffsetsRequiredError, match="HEADWATER_ENRICHER_STARTING_OFFSETS"):
        read_ingest(spark, s)


@pytest.mark.spark
def test_the_raw_stream_has_the_kafka_source_columns(spark, tmp_path) -> None:
    from headwater.enricher.driver.job import read_ingest

    s = EnricherSettings(checkpoint_location=str(tmp_path / "cp"), starting_offsets="earliest")
    raw = read_ingest(spark, s)
    assert raw.schema.fieldNames() == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
        "headers",
    ]
