"""One declaration per setting: the environment, flags, --help and docs all come from it."""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

import pytest

from headwater.kafka.settings import KafkaSettings
from headwater.runtime.env import SettingError
from headwater.runtime.settings import Renamed, Settings, setting
from headwater.runtime.startup import settings_variables
from headwater.subscriber.settings import SubscriberSettings


@dataclass(frozen=True)
class Example(Settings):
    """One setting of every kind the base reads."""

    env_prefix: ClassVar[str] = "HEADWATER_EXAMPLE_"

    name: str = setting(help="who", flag=True)
    count: int = setting(3, minimum=1, help="how many", flag=True)
    wait_s: float = setting(
        0.5, unit="s", help="how long", renamed=(Renamed("HEADWATER_EXAMPLE_WAIT_MS", 0.001),)
    )
    loud: bool = setting(False, help="shout", flag=True)
    tags: tuple[str, ...] = setting(("a", "b"), help="labels")
    mode: Literal["fast", "safe"] = setting("safe", help="how")
    level: str = setting("low", choices=("low", "HIGH"), help="level")
    limit: int | None = setting(None, help="optional cap")
    password: str = setting("", secret=True, help="never shown")
    in_code: int = setting(7, env="", help="given in code only")


def test_from_env_reads_every_kind_and_the_defaults():
    settings = Example.from_env(
        {
            "HEADWATER_EXAMPLE_NAME": " x ",
            "HEADWATER_EXAMPLE_COUNT": "4",
            "HEADWATER_EXAMPLE_WAIT_SECONDS": "1.5",
            "HEADWATER_EXAMPLE_LOUD": "yes",
            "HEADWATER_EXAMPLE_TAGS": "p, q,,",
            "HEADWATER_EXAMPLE_MODE": "FAST",
            "HEADWATER_EXAMPLE_LEVEL": "high",
            "HEADWATER_EXAMPLE_LIMIT": "9",
            "HEADWATER_EXAMPLE_IN_CODE": "99",  # not a variable: ignored
        }
    )
    assert settings == Example("x", 4, 1.5, True, ("p", "q"), "fast", "HIGH", 9, "", 7)
    defaults = Example.from_env({"HEADWATER_EXAMPLE_NAME": "x", "HEADWATER_EXAMPLE_COUNT": ""})
    assert defaults == Example("x")


def test_a_duration_is_named_seconds():
    assert Example.variable("wait_s") == "HEADWATER_EXAMPLE_WAIT_SECONDS"
    assert KafkaSettings.variable("linger_s") == "HEADWATER_KAFKA_LINGER_SECONDS"
    assert SubscriberSettings.variable("handler_timeout_s").endswith("_HANDLER_TIMEOUT_SECONDS")


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, "HEADWATER_EXAMPLE_NAME is not set: who"),
        ({"HEADWATER_EXAMPLE_COUNT": "many"}, "HEADWATER_EXAMPLE_COUNT='many' is not an integer"),
        ({"HEADWATER_EXAMPLE_COUNT": "0"}, "HEADWATER_EXAMPLE_COUNT=0 must be at least 1"),
        ({"HEADWATER_EXAMPLE_WAIT_SECONDS": "soon"}, "WAIT_SECONDS='soon' is not a number"),
        ({"HEADWATER_EXAMPLE_LOUD": "maybe"}, "LOUD='maybe' is not a boolean"),
        ({"HEADWATER_EXAMPLE_MODE": "slow"}, "MODE='slow': use one of fast, safe"),
        ({"HEADWATER_EXAMPLE_LEVEL": "mid"}, "LEVEL='mid': use one of low, HIGH"),
    ],
)
def test_a_bad_value_is_an_error_naming_the_variable(env, message):
    base = {} if not env else {"HEADWATER_EXAMPLE_NAME": "x"}
    with pytest.raises(SettingError) as raised:
        Example.from_env(base | env)
    assert message in str(raised.value)


def test_an_earlier_name_is_read_with_a_warning_and_the_new_name_wins(caplog):
    with caplog.at_level(logging.WARNING, logger="headwater.settings"):
        old = Example.from_env({"HEADWATER_EXAMPLE_NAME": "x", "HEADWATER_EXAMPLE_WAIT_MS": "250"})
    assert old.wait_s == pytest.approx(0.25)
    (record,) = caplog.records
    assert record.getMessage() == (
        "HEADWATER_EXAMPLE_WAIT_MS is deprecated: set HEADWATER_EXAMPLE_WAIT_SECONDS instead "
        "(the earlier name is read until the next release)"
    )
    caplog.clear()
    both = {"HEADWATER_EXAMPLE_WAIT_MS": "250", "HEADWATER_EXAMPLE_WAIT_SECONDS": "2"}
    assert Example.from_env({"HEADWATER_EXAMPLE_NAME": "x"} | both).wait_s == 2.0
    assert caplog.records == []
    with pytest.raises(SettingError, match="HEADWATER_EXAMPLE_WAIT_MS='x' is not a number"):
        Example.from_env({"HEADWATER_EXAMPLE_NAME": "x", "HEADWATER_EXAMPLE_WAIT_MS": "x"})


@pytest.mark.parametrize(
    ("settings", "old", "value", "read"),
    [
        (KafkaSettings, "HEADWATER_KAFKA_LINGER_MS", "20", lambda s: s.linger_ms == 20),
        (
            SubscriberSettings,
            "HEADWATER_SUBSCRIBER_HANDLER_TIMEOUT_S",
            "3",
            lambda s: s.handler_timeout_s == 3.0,
        ),
        (
            SubscriberSettings,
            "HEADWATER_SUBSCRIBER_MAX_POLL_INTERVAL_S",
            "60",
            lambda s: s.max_poll_interval_s == 60.0,
        ),
    ],
)
def test_the_old_duration_names_still_work_for_one_release(caplog, settings, old, value, read):
    env = {"HEADWATER_SUBSCRIBER_GROUP_ID": "g", old: value}
    with caplog.at_level(logging.WARNING, logger="headwater.settings"):
        assert read(settings.from_env(env))
    assert [r.deprecated for r in caplog.records] == [old]  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Earlier(Settings):
    """A seconds setting whose earlier name and flag took a unit ("30s")."""

    env_prefix: ClassVar[str] = "HEADWATER_EXAMPLE_"

    every_s: float = setting(
        60.0,
        minimum=1,
        unit="s",
        flag=True,
        help="how often",
        renamed=(Renamed("HEADWATER_EXAMPLE_EVERY", with_unit=True, flag="--every"),),
    )


@pytest.mark.parametrize(
    ("raw", "seconds"),
    [("1500ms", 1.5), ("2.5", 2.5), ("30s", 30), ("10m", 600), ("2h", 7200), ("1d", 86400)],
)
def test_an_earlier_duration_with_a_unit_is_read_as_seconds(caplog, raw, seconds):
    parser = argparse.ArgumentParser()
    Earlier.add_arguments(parser)
    with caplog.at_level(logging.WARNING, logger="headwater.settings"):
        by_env = Earlier.from_env({"HEADWATER_EXAMPLE_EVERY": raw}).every_s
        by_flag = Earlier.from_args(parser.parse_args(["--every", raw]), {}).every_s
    assert by_env == by_flag == pytest.approx(seconds)
    deprecated = [r.deprecated for r in caplog.records]  # type: ignore[attr-defined]
    assert deprecated == ["HEADWATER_EXAMPLE_EVERY", "--every"]


def test_an_earlier_duration_is_checked_as_the_new_one_and_its_flag_is_not_offered():
    parser = argparse.ArgumentParser()
    Earlier.add_arguments(parser)
    assert "--every-seconds" in parser.format_help()
    assert "--every " not in parser.format_help()
    with pytest.raises(SettingError, match="HEADWATER_EXAMPLE_EVERY='soon' is not a duration"):
        Earlier.from_env({"HEADWATER_EXAMPLE_EVERY": "soon"})
    with pytest.raises(SettingError, match=r"HEADWATER_EXAMPLE_EVERY=0\.5 must be at least 1"):
        Earlier.from_env({"HEADWATER_EXAMPLE_EVERY": "500ms"})
    with pytest.raises(SettingError, match="--every='1 week' is not a duration"):
        Earlier.from_args(parser.parse_args(["--every", "1 week"]), {})
    # The new flag wins over the earlier one, the new name over the earlier name.
    args = parser.parse_args(["--every-seconds", "5", "--every", "1h"])
    assert Earlier.from_args(args, {"HEADWATER_EXAMPLE_EVERY": "2h"}).every_s == 5.0
    env = {"HEADWATER_EXAMPLE_EVERY_SECONDS": "7", "HEADWATER_EXAMPLE_EVERY": "2h"}
    assert Earlier.from_env(env).every_s == 7.0
    assert (
        "(earlier name `HEADWATER_EXAMPLE_EVERY`, flag `--every`: still read"
        in Earlier.markdown_table()
    )


def test_a_secret_is_never_printed_nor_a_flag():
    settings = Example.from_env({"HEADWATER_EXAMPLE_NAME": "x", "HEADWATER_EXAMPLE_PASSWORD": "pw"})
    assert settings.password == "pw" and "pw" not in repr(settings)
    parser = argparse.ArgumentParser()
    Example.add_arguments(parser)
    assert "--password" not in parser.format_help()
    kafka = KafkaSettings.from_env({"HEADWATER_KAFKA_SASL_PASSWORD": "s3cret"})
    assert "s3cret" not in repr(kafka)


def test_flags_win_over_the_environment_and_say_their_variable_and_default():
    parser = argparse.ArgumentParser()
    Example.add_arguments(parser)
    text = " ".join(parser.format_help().split())
    assert "--count COUNT how many (default: $HEADWATER_EXAMPLE_COUNT, else 3)" in text
    assert "--loud, --no-loud" in text
    env = {"HEADWATER_EXAMPLE_NAME": "env", "HEADWATER_EXAMPLE_COUNT": "5"}
    assert Example.from_args(parser.parse_args([]), env) == Example("env", 5)
    args = parser.parse_args(["--name", "flag", "--count", "6", "--loud"])
    assert Example.from_args(args, env) == Example("flag", 6, loud=True)
    # A required setting may come from its flag alone; an error names the flag.
    assert Example.from_args(parser.parse_args(["--name", "n"]), {}).name == "n"
    with pytest.raises(SettingError, match="--name or HEADWATER_EXAMPLE_NAME is not set"):
        Example.from_args(parser.parse_args([]), {})
    with pytest.raises(SettingError, match="--count='x' is not an integer"):
        Example.from_args(parser.parse_args(["--count", "x"]), env)


def test_the_docs_table_comes_from_the_declarations():
    table = Example.markdown_table()
    assert table.splitlines()[:2] == ["| variable | default | meaning |", "| --- | --- | --- |"]
    rows = {line.split(" | ")[0].strip("| `"): line for line in table.splitlines()[2:]}
    assert rows["HEADWATER_EXAMPLE_NAME"] == (
        "| `HEADWATER_EXAMPLE_NAME` | (required) | who; flag `--name` |"
    )
    assert rows["HEADWATER_EXAMPLE_WAIT_SECONDS"] == (
        "| `HEADWATER_EXAMPLE_WAIT_SECONDS` | `0.5` s | how long (earlier name "
        "`HEADWATER_EXAMPLE_WAIT_MS`: still read until the next release) |"
    )
    assert (
        rows["HEADWATER_EXAMPLE_PASSWORD"]
        == "| `HEADWATER_EXAMPLE_PASSWORD` | (none) | never shown |"
    )
    assert "in_code" not in table
    assert "| `in_code` |  | `7` | given in code only |" in Example.markdown_table(with_fields=True)


def test_help_lists_what_from_env_reads_with_the_shown_defaults():
    listed = settings_variables(Example.from_env)
    assert list(listed) == [
        f"HEADWATER_EXAMPLE_{n}"
        for n in ("NAME", "COUNT", "WAIT_SECONDS", "LOUD", "TAGS", "MODE", "LEVEL", "LIMIT")
    ] + ["HEADWATER_EXAMPLE_PASSWORD"]
    assert listed["HEADWATER_EXAMPLE_TAGS"] == "a,b" and listed["HEADWATER_EXAMPLE_NAME"] == ""
    kafka = settings_variables(KafkaSettings.from_env)
    assert kafka["HEADWATER_KAFKA_CLIENT_ID"] == "<role>-<pod name or host-pid>"
    assert kafka["HEADWATER_KAFKA_SASL_PASSWORD"] == ""


# -- the shared Kafka options of the commands --------------------------------------------------

#: The command groups of src/headwater's libraries that talk to Kafka.
KAFKA_GROUPS = ("topics", "dlq", "offsets", "lag", "status", "master", "command")


def _commands(parser: argparse.ArgumentParser, words: tuple[str, ...] = ()):
    """Every runnable (sub)command parser below ``parser``, with its words."""
    subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subparsers:
        yield words, parser
    for action in subparsers:
        for name, sub in action.choices.items():
            yield from _commands(sub, (*words, name))


def test_every_kafka_command_takes_the_one_shared_set_of_kafka_options():
    from headwater.cli import build_parser

    flags = {d.flag for d in KafkaSettings.declared() if d.flag}
    assert {"--bootstrap-servers", "--security-protocol", "--ssl-ca-location"} <= flags
    seen = []
    for words, parser in _commands(build_parser()):
        if words[0] not in KAFKA_GROUPS:
            continue
        options = {s for a in parser._actions for s in a.option_strings}
        assert flags <= options, words
        seen.append(words)
    assert len(seen) >= 12, seen  # dlq x3, offsets x3, lag, status, topics, master x4, command x3


def test_no_library_nor_service_declares_a_kafka_flag_by_hand():
    root = Path(__file__).resolve().parents[2]
    files = [*(root / "src" / "headwater").rglob("*.py"), *(root / "services").rglob("*.py")]
    assert len(files) > 100
    by_hand = [
        str(path.relative_to(root))
        for path in files
        if '"--bootstrap-servers"' in path.read_text() or '"--topic-prefix"' in path.read_text()
    ]
    assert by_hand == []


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["dlq", "list", "--security-protocol", "TLS"], ["--security-protocol='TLS'", "SASL_SSL"]),
        (
            ["master", "show", "--tenant", "t", "--device", "d", "--sasl-mechanism", "PLAIN"],
            ["HEADWATER_KAFKA_SASL_MECHANISM is set: set HEADWATER_KAFKA_SASL_USERNAME"],
        ),
        (
            ["topics", "ensure", "--ssl-ca-location", "/no/such/ca.pem"],
            ["HEADWATER_KAFKA_SSL_CA_LOCATION='/no/such/ca.pem'"],
        ),
    ],
)
def test_a_bad_kafka_option_is_one_line_and_exit_2(argv, words):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEADWATER_")}
    result = subprocess.run(
        [sys.executable, "-m", "headwater.cli", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"headwater {argv[0]} {argv[1]}: "), line
    for word in words:
        assert word in line
