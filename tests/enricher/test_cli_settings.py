"""Settings from the environment, flags over env, and the CLI contract."""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys

import pytest

from headwater.enricher.driver.cli import register
from headwater.enricher.driver.settings import EnricherSettings
from headwater.enricher.errors import StartingOffsetsRequiredError
from headwater.enricher.topics import EnricherTopics
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
            "HEADWATER_ENRICHER_TRIGGER_INTERVAL_SECONDS": "0.25",
            "HEADWATER_ENRICHER_MAX_ATTEMPTS": "7",
            "HEADWATER_ENRICHER_DEDUP_WINDOW_SECONDS": "7200",
            "HEADWATER_ENRICHER_TOPIC_PREFIX": "dev.",
            "HEADWATER_ENRICHER_MAX_PARKED_BYTES": "1000000",
            "HEADWATER_ENRICHER_DEDUP_MAX_RECENT_IDS": "1000",
            "HEADWATER_ENRICHER_DEDUP_MAX_IDS_PER_HOUR": "2000",
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
    assert (s.dedup_max_recent_ids, s.dedup_max_ids_per_hour) == (1000, 2000)
    with pytest.raises(dataclasses_frozen_error()):
        s.max_attempts = 1  # type: ignore[misc]


def dataclasses_frozen_error() -> type[Exception]:
    import dataclasses

    return dataclasses.FrozenInstanceError


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("HEADWATER_ENRICHER_STARTING_OFFSETS", "newest"),
        ("HEADWATER_ENRICHER_TRIGGER_INTERVAL_SECONDS", "soon"),
        ("HEADWATER_ENRICHER_TRIGGER_INTERVAL_SECONDS", "1s"),
        ("HEADWATER_ENRICHER_TRIGGER_INTERVAL", "soon"),
        ("HEADWATER_ENRICHER_DEDUP_WINDOW_SECONDS", "0.5"),
        ("HEADWATER_ENRICHER_MAX_ATTEMPTS", "0"),
        ("HEADWATER_ENRICHER_MAX_PARKED_BYTES", "0"),
        ("HEADWATER_ENRICHER_DEDUP_MAX_RECENT_IDS", "0"),
        ("HEADWATER_ENRICHER_DEDUP_MAX_IDS_PER_HOUR", "0"),
        ("HEADWATER_ENRICHER_DRIVER_MEMORY", "lots"),
        ("HEADWATER_ENRICHER_DRIVER_MEMORY", "2 GB"),
    ],
)
def test_bad_values_name_the_variable(name: str, value: str) -> None:
    with pytest.raises(SettingError, match=name):
        EnricherSettings.from_env({name: value})


@pytest.mark.parametrize(
    ("old", "value", "field", "seconds"),
    [
        ("HEADWATER_ENRICHER_TRIGGER_INTERVAL", "250ms", "trigger_interval_seconds", 0.25),
        ("HEADWATER_ENRICHER_TRIGGER_INTERVAL", "1.5", "trigger_interval_seconds", 1.5),
        ("HEADWATER_ENRICHER_RETRY_BACKOFF", "30s", "retry_backoff_seconds", 30.0),
        ("HEADWATER_ENRICHER_RETRY_BACKOFF_MAX", "10m", "retry_backoff_max_seconds", 600.0),
        ("HEADWATER_ENRICHER_DEDUP_WINDOW", "2h", "dedup_window_seconds", 7200.0),
        ("HEADWATER_ENRICHER_DEDUP_HORIZON", "8d", "dedup_horizon_seconds", 8 * 86400.0),
    ],
)
def test_the_earlier_duration_names_and_forms_are_read_with_a_warning(
    caplog: pytest.LogCaptureFixture, old: str, value: str, field: str, seconds: float
) -> None:
    with caplog.at_level(logging.WARNING, logger="headwater.settings"):
        s = EnricherSettings.from_env({old: value})
    assert getattr(s, field) == pytest.approx(seconds)
    (record,) = caplog.records
    new = EnricherSettings.variable(field)
    assert new == old + "_SECONDS"
    assert record.getMessage().startswith(f"{old} is deprecated: set {new} instead")
    caplog.clear()
    assert getattr(EnricherSettings.from_env({old: value, new: "3"}), field) == 3.0
    assert caplog.records == []  # the new name wins, silently


def test_the_earlier_duration_flags_are_taken_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    args = _parse(["enricher", "run", "--trigger-interval", "500ms", "--dedup-window", "1h"])
    with caplog.at_level(logging.WARNING, logger="headwater.settings"):
        s = EnricherSettings.from_args(args, {"HEADWATER_ENRICHER_DEDUP_WINDOW_SECONDS": "60"})
    assert (s.trigger_interval_seconds, s.dedup_window_seconds) == (0.5, 3600.0)
    assert [r.getMessage().split(" (")[0] for r in caplog.records] == [
        "--trigger-interval is deprecated: set --trigger-interval-seconds instead",
        "--dedup-window is deprecated: set --dedup-window-seconds instead",
    ]
    new = _parse(["enricher", "run", "--trigger-interval-seconds", "2", "--trigger-interval", "1m"])
    assert EnricherSettings.from_args(new, {}).trigger_interval_seconds == 2.0
    with pytest.raises(SettingError, match="--trigger-interval='soon' is not a duration"):
        EnricherSettings.from_args(_parse(["enricher", "run", "--trigger-interval", "soon"]), {})


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
            "--bootstrap-servers",
            "flag:9092",
            "--topic-prefix",
            "t.",
        ]
    )
    s = EnricherSettings.from_args(
        args,
        {
            "HEADWATER_ENRICHER_STARTING_OFFSETS": "latest",
            "HEADWATER_ENRICHER_MAX_ATTEMPTS": "9",
            "HEADWATER_ENRICHER_MAX_RECORDS_PER_TRIGGER": "11",
            "HEADWATER_KAFKA_BOOTSTRAP_SERVERS": "env:9092",
            "HEADWATER_ENRICHER_TOPIC_PREFIX": "env.",
        },
    )
    assert (s.starting_offsets, s.max_attempts, args.max_seconds) == ("earliest", 2, 5.0)
    assert (s.max_records_per_trigger, s.kafka.bootstrap_servers) == (11, "flag:9092")
    assert s.topics == EnricherTopics.with_prefix("t.")


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
    for d in EnricherSettings.declared():  # every flag the declarations give
        if d.flag:
            assert d.flag in out, d.flag
    for flag in (
        "--starting-offsets",
        "--max-seconds",
        "--dedup-window-seconds",
        "--trigger-interval-seconds",
        "--checkpoint-location",
        "--bootstrap-servers",
        "--security-protocol",
        "--topic-prefix",
    ):
        assert flag in out
    assert "--dedup-window " not in out  # the earlier flags are taken, not offered


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
