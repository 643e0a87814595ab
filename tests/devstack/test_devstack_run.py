"""The README's run command, short and without the enricher: nothing acked goes missing,
and with ``--connectors`` one device of each gateway connector comes through too."""

from __future__ import annotations

import json
import subprocess
import sys

from headwater_dev.edge import mosquitto


def test_devstack_ingest_path_end_to_end(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "headwater.cli",
            "devstack",
            "run",
            "--duration",
            "6",
            "--rate",
            "300",
            "--gateways",
            "3",
            "--devices",
            "10",
            "--no-enricher",
            "--connectors",
            "--json",
            "--workdir",
            str(tmp_path / "stack"),
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["acked"] > 500
    assert summary["acked_but_missing_in_kafka"] == 0
    # The fleet's deliberate mistakes come back as the right rejections: permanent ones
    # per message, and the rogue gateway's bad token for its calls, which keeps its
    # messages spooled (the gateway library never drops them for a credentials problem).
    assert {"PAYLOAD_TOO_LARGE", "INVALID_MESSAGE", "DEVICE_NOT_PERMITTED"} <= set(
        summary["rejected"]
    )
    assert "INVALID_TOKEN" in summary["retried"]
    assert summary["still_spooled"]["gw-rogue"] > 0
    assert set(summary["still_spooled"]) == {"gw-rogue"}
    assert summary["ingest_records_in_kafka"] >= summary["acked"]
    # One device per connector behind one `headwater gateway run`: what its gateway
    # spooled is all in Kafka (the run lets it drain), one message per value here.
    connectors = summary["connectors"]
    assert set(connectors) == {"mqtt", "opcua", "modbus"}
    # Mosquitto is a Debian package (.ci/run installs it): without it MQTT is left out.
    assert ("left_out" in connectors["mqtt"]) == (mosquitto.installed() is None)
    for name, figures in connectors.items():
        if "left_out" in figures:
            continue
        assert figures["values_spooled"] > 0, (name, figures)
        assert figures["messages_in_kafka"] == figures["values_spooled"], (name, figures)
        assert figures["enriched"] is None  # no enricher in this run


def test_topics_ensure_creates_then_reports_ok(kafka_bootstrap):
    cmd = [
        sys.executable,
        "-m",
        "headwater.cli",
        "topics",
        "ensure",
        "--bootstrap-servers",
        kafka_bootstrap,
        "--partitions",
        "2",
        "--replication-factor",
        "1",
        "--json",
    ]
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    second = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    first_actions = {json.loads(line)["action"] for line in first.stdout.splitlines()}
    actions = [json.loads(line) for line in second.stdout.splitlines()]
    assert first_actions <= {"created", "ok", "drift"} and first_actions
    # The second run creates nothing. Topics other tests made with other partition counts
    # show up as drift (exit 3), and are never changed.
    assert {a["action"] for a in actions} <= {"ok", "drift"}
    assert second.returncode == (3 if any(a["action"] == "drift" for a in actions) else 0)


def test_every_command_has_help():
    for args in (
        [],
        ["devstack", "run"],
        ["ingest", "serve"],
        ["ingest", "hash-token"],
        ["topics", "ensure"],
    ):
        result = subprocess.run(
            [sys.executable, "-m", "headwater.cli", *args, "--help"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0 and "usage: headwater" in result.stdout, args


def test_a_negative_warm_up_is_refused_before_anything_starts(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "headwater.cli", "devstack", "run", "--warmup", "-1"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert result.returncode == 2
    assert result.stdout.strip() == "--warmup -1: use 0 (none) or more seconds"
    assert not (tmp_path / ".devstack").exists()
