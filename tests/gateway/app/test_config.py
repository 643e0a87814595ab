"""gateway.yaml: a good file is read as written; every bad field gets its own clear line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from headwater.gateway.app.config import ConfigError, load, parse

HEADWATER = str(Path(sys.executable).parent / "headwater")

GOOD = {
    "ingest": {"target": "127.0.0.1:50051", "token_env": "EDGE_TEST_TOKEN"},
    "spool": {"path": "spool.db", "max_bytes": 1048576, "max_age_s": 3600},
    "connectors": [
        {
            "name": "edge-mqtt",
            "type": "mqtt",
            "broker": {"host": "127.0.0.1", "client_id": "gw-1"},
            "sparkplug": {"groups": ["acme-line1"]},
            "topics": [
                {
                    "filter": "plant/+/telemetry",
                    "device_id": "acme-{1}",
                    "content_type": "application/vnd.acme.telemetry.v1+json",
                    "command_topic": "plant/{1}/commands",
                }
            ],
        },
        {
            "name": "press",
            "type": "opcua",
            "url": "opc.tcp://127.0.0.1:4840/",
            "device_id": "acme-press-1",
            "items": [
                {"node_id": "ns=2;s=Temperature", "deadband": "absolute", "deadband_value": 0.5}
            ],
        },
        {
            "name": "meter",
            "type": "modbus",
            "host": "127.0.0.1",
            "device_id": "acme-meter-1",
            "registers": [
                {
                    "name": "power",
                    "table": "holding",
                    "address": 0,
                    "type": "float32",
                    "word_order": "little",
                    "unit": "kW",
                }
            ],
        },
    ],
}


@pytest.fixture(autouse=True)
def _token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDGE_TEST_TOKEN", "s3cret")


def test_a_good_file_is_read_with_its_defaults() -> None:
    config = parse(GOOD)
    assert config.ingest.target == "127.0.0.1:50051" and config.ingest.token == "s3cret"
    assert "s3cret" not in repr(config)
    assert config.spool.limits.max_bytes == 1048576 and config.spool.when_full == "backpressure"
    mqtt, opcua, modbus = config.connectors
    assert mqtt.qos == 1 and mqtt.sparkplug is not None
    assert mqtt.sparkplug.device_id == "{group}:{node}:{device}"
    assert opcua.items[0].field == "Temperature" and opcua.items[0].deadband_value == 0.5
    assert modbus.registers[0].count == 2 and modbus.poll_interval_s == 1.0


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        (("ingest", "target"), None, "ingest.target: is required"),
        (("ingest", "token_env"), "EDGE_UNSET_VAR", "ingest.token_env: the environment variable"),
        (("ingest", "frame_messages"), 501, "ingest.frame_messages: must be 1 to 500"),
        (("spool", "when_full"), "explode", "spool.when_full: must be one of backpressure"),
        (("spool", "max_bytes"), "big", "spool.max_bytes: must be an integer"),
        (("spool", "colour"), "red", "spool.colour: is not a known field"),
        (("connectors", 0, "broker", "port"), 70000, "connectors[0].broker.port: must be 1 to"),
        (("connectors", 0, "qos"), 2, "connectors[0].qos: must be 0 to 1"),
        (
            ("connectors", 0, "topics", 0, "filter"),
            "a/#/b",
            "connectors[0].topics[0].filter: 'a/#/b' is not an MQTT topic filter",
        ),
        (
            ("connectors", 0, "topics", 0, "device_id"),
            "acme-{x}",
            "connectors[0].topics[0].device_id: 'acme-{x}' uses {x}; it may use {0}..{31}",
        ),
        (
            ("connectors", 0, "sparkplug", "device_id"),
            "{group}-{edge}",
            "connectors[0].sparkplug.device_id: '{group}-{edge}' uses {edge}",
        ),
        (("connectors", 1, "url"), "http://x", "connectors[1].url: 'http://x' does not match"),
        (
            ("connectors", 1, "items", 0, "queue_size"),
            0,
            "connectors[1].items[0].queue_size: must be 1 to 10000",
        ),
        (
            ("connectors", 1, "security", "policy"),
            "Basic256Sha256",
            "connectors[1].security.policy: Basic256Sha256 needs certificate_file",
        ),
        (
            ("connectors", 2, "registers", 0, "type"),
            "float16",
            "connectors[2].registers[0].type: must be one of bool, int16",
        ),
        (
            ("connectors", 2, "registers", 0, "table"),
            "coil",
            "connectors[2].registers[0].type: coil values are bool",
        ),
        (("connectors", 2, "device_id"), "acme meter", "connectors[2].device_id: 'acme meter'"),
        (("connectors", 2, "type"), "pigeon", "connectors[2].type: must be one of mqtt, opcua"),
        (
            ("connectors", 1, "name"),
            "edge-mqtt",
            "connectors[1].name: 'edge-mqtt' is used by another connector",
        ),
    ],
)
def test_each_bad_field_is_named_with_what_is_wrong(path, value, expected) -> None:
    doc = yaml.safe_load(yaml.safe_dump(GOOD))
    node = doc
    for key in path[:-1]:
        node = node.setdefault(key, {}) if isinstance(key, str) else node[key]
    node[path[-1]] = value
    with pytest.raises(ConfigError) as info:
        parse(doc)
    assert len(info.value.problems) == 1, info.value.problems
    assert info.value.problems[0].startswith(expected), info.value.problems


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(ConfigError) as info:
        parse({"ingest": {"target": 5}, "spool": {}, "connectors": [{"type": "mqtt"}]})
    problems = info.value.problems
    assert "ingest.target: must be a non-empty string, not 5" in problems
    assert "spool.path: is required" in problems
    assert "connectors[0].name: is required" in problems
    assert "connectors[0].broker: is required" in problems


def test_check_config_prints_the_connectors_or_one_line_per_problem(tmp_path: Path) -> None:
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(yaml.safe_dump(GOOD))
    ok = subprocess.run(
        [HEADWATER, "gateway", "check-config", "--config", str(good)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ok.returncode == 0, ok.stderr
    assert '"name": "press", "type": "opcua"' in ok.stdout and "s3cret" not in ok.stdout
    bad.write_text("ingest: {target: x}\nspool: {path: p, when_full: nope}\nconnectors: []\n")
    out = subprocess.run(
        [HEADWATER, "gateway", "check-config", "--config", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert lines == [
        f"headwater gateway check-config: {bad}: spool.when_full: must be one of "
        "backpressure, drop_oldest, not 'nope'",
        f"headwater gateway check-config: {bad}: connectors: must list at least one entry",
    ]
    missing = subprocess.run(
        [HEADWATER, "gateway", "run", "--config", str(tmp_path / "no")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 2 and "cannot read the file" in missing.stderr


def test_yaml_that_does_not_parse_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("ingest: [unclosed\n")
    with pytest.raises(ConfigError) as info:
        load(path)
    (problem,) = info.value.problems
    assert problem.startswith("not valid YAML") and "\n" not in problem
