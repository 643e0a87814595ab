"""The ingest settings, declared once: earlier names, flags over variables, the error tree."""

from __future__ import annotations

import argparse
import inspect
import logging

import grpc
import pytest

from headwater.errors import HeadwaterError
from headwater.ingest import errors
from headwater.ingest.admission.limits import Admission
from headwater.ingest.commands.settings import CommandSettings
from headwater.ingest.errors import OverloadedError
from headwater.ingest.settings import IngestSettings
from headwater.kafka.options import add_kafka_options
from headwater.runtime.env import SettingError

OPEN = {"HEADWATER_INGEST_ALLOW_UNAUTHENTICATED": "true"}


@pytest.mark.parametrize(
    ("old", "value", "read"),
    [
        ("HEADWATER_INGEST_MIN_DEADLINE_MS", "20", lambda s: s.min_deadline_s == 0.02),
        (
            "HEADWATER_INGEST_OVERLOAD_RETRY_DELAY_MS",
            "500",
            lambda s: s.overload_retry_delay_s == 0.5,
        ),
    ],
)
def test_the_ms_names_are_still_read_for_one_release_with_a_warning(caplog, old, value, read):
    with caplog.at_level(logging.WARNING, logger="headwater.settings"):
        assert read(IngestSettings.from_env(OPEN | {old: value}))
    assert [r.deprecated for r in caplog.records] == [old]  # type: ignore[attr-defined]


def test_the_seconds_name_wins_over_the_earlier_ms_name():
    env = OPEN | {
        "HEADWATER_INGEST_MIN_DEADLINE_SECONDS": "0.3",
        "HEADWATER_INGEST_MIN_DEADLINE_MS": "20",
    }
    assert IngestSettings.from_env(env).min_deadline_s == 0.3


def test_a_deadline_floor_set_by_its_earlier_name_refuses_calls_and_names_the_new_one():
    settings = IngestSettings.from_env(OPEN | {"HEADWATER_INGEST_MIN_DEADLINE_MS": "5000"})
    with pytest.raises(OverloadedError, match="HEADWATER_INGEST_MIN_DEADLINE_SECONDS") as err:
        Admission(settings).check_deadline(3.0)
    assert err.value.setting == "HEADWATER_INGEST_MIN_DEADLINE_SECONDS"
    assert err.value.limit_value == 5000  # the QuotaFailure value stays in ms (its quota id)


def serve_parser() -> argparse.ArgumentParser:
    """The flags ``headwater ingest serve`` takes, from the declarations."""
    parser = argparse.ArgumentParser()
    IngestSettings.add_arguments(parser)
    add_kafka_options(parser)
    return parser


def test_a_flag_wins_over_its_variable_and_kafka_flags_reach_the_kafka_settings():
    flags = ["--listen-address", "127.0.0.1:7001", "--producer", "AIOKAFKA"]
    flags += ["--bootstrap-servers", "kafka-a:9092", "--allow-unauthenticated"]
    args = serve_parser().parse_args(flags)
    env = {"HEADWATER_INGEST_LISTEN_ADDRESS": "127.0.0.1:9", "HEADWATER_INGEST_MAX_STREAMS": "7"}
    settings = IngestSettings.from_args(args, env)
    assert (settings.listen_address, settings.producer) == ("127.0.0.1:7001", "aiokafka")
    assert settings.allow_unauthenticated and settings.max_streams == 7
    assert settings.kafka.bootstrap_servers == "kafka-a:9092"


def test_a_bad_flag_value_names_the_flag():
    args = serve_parser().parse_args(["--metrics-port", "nine", "--allow-unauthenticated"])
    with pytest.raises(SettingError, match="--metrics-port='nine' is not an integer"):
        IngestSettings.from_args(args, {})


def test_serve_help_shows_each_flag_with_its_variable():
    text = serve_parser().format_help()
    for flag, variable in [
        ("--listen-address", "HEADWATER_INGEST_LISTEN_ADDRESS"),
        ("--tokens-file", "HEADWATER_INGEST_TOKENS_FILE"),
        ("--producer", "HEADWATER_INGEST_PRODUCER"),
        ("--bootstrap-servers", "HEADWATER_KAFKA_BOOTSTRAP_SERVERS"),
    ]:
        assert flag in text and variable in text, (flag, variable)


@pytest.mark.parametrize(
    ("env", "instance"),
    [
        ({"POD_NAME": "ingest-0"}, "ingest-0"),
        ({"POD_NAME": "ingest-0", "HEADWATER_INGEST_COMMANDS_RELAY_INSTANCE_ID": "r1"}, "r1"),
        ({}, ""),
    ],
)
def test_the_relay_instance_id_is_the_pod_name_unless_set(env, instance):
    assert CommandSettings.from_env(env).relay_instance_id == instance


#: The codes a gateway retries on; an error answered with one of them is retriable.
RETRIED = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
}


def test_every_ingest_error_is_a_headwater_error_retriable_as_its_code_says():
    classes = [
        c
        for c in vars(errors).values()
        if inspect.isclass(c) and issubclass(c, BaseException) and c.__module__ == errors.__name__
    ]
    assert len(classes) >= 9, classes  # the walk sees them
    for cls in classes:
        assert issubclass(cls, HeadwaterError), cls
        assert cls.retriable is (cls.code in RETRIED), cls
