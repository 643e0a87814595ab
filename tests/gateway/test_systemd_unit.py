"""The systemd unit users install (docs/gateway/headwater-gateway.service).

systemd's own ``systemd-analyze verify`` takes it without a complaint; its commands are
ones ``headwater gateway`` accepts (``check-config`` passes on every config example of
docs/gateway.md); its state directory is where those examples keep the spool, and it is
writable under ``ProtectSystem=strict``; it stops with SIGTERM and waits longer than the
gateway's drain may take.
"""

from __future__ import annotations

import configparser
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from headwater.cli import build_parser
from headwater.gateway.app import cli as gateway_cli
from headwater.gateway.config import GatewayConfig

from .connectors.test_docs import example

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "docs" / "gateway" / "headwater-gateway.service"
#: The unit's fixed paths, as docs/gateway.md tells users to install.
HEADWATER = "/opt/headwater/bin/headwater"
CONFIG = "/etc/headwater/gateway.yaml"
#: The docs' config examples, by the word their first line names.
EXAMPLES = ("MQTT", "OPC UA", "Modbus")


def service() -> configparser.SectionProxy:
    parser = configparser.RawConfigParser(strict=True, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keys keep their case
    parser.read_string(UNIT.read_text())
    return parser["Service"]


def verify(unit_text: str, root: Path) -> str:
    """What ``systemd-analyze verify`` says about ``unit_text`` installed in ``root``."""
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze is required: apt-get install systemd"
    if not (root / "usr/lib/systemd/system").exists():
        # The system's own units (the targets the unit orders itself after), symlinks kept.
        shutil.copytree(Path("/usr/lib/systemd/system"), root / "usr/lib/systemd/system",
                        symlinks=True)  # fmt: skip
        binary = root / HEADWATER.lstrip("/")
        binary.parent.mkdir(parents=True)
        binary.write_text("#!/bin/sh\n")  # verify checks the commands are executable
        binary.chmod(0o755)
        (root / "etc/systemd/system").mkdir(parents=True)
    installed = root / "etc/systemd/system" / UNIT.name
    installed.write_text(unit_text)
    done = subprocess.run(
        [analyze, "verify", "--man=no", "--generators=no", f"--root={root}", str(installed)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    return f"exit {done.returncode}: {done.stderr}" if done.returncode else done.stderr


def test_systemd_takes_the_unit_without_a_complaint(tmp_path: Path) -> None:
    text = UNIT.read_text()
    assert verify(text, tmp_path) == ""
    # It would say so: a misspelt key and a bad value are reported.
    assert "Unknown key 'UMsk'" in verify(text.replace("UMask=", "UMsk="), tmp_path)
    assert "bogus" in verify(text.replace("UMask=0077", "UMask=bogus"), tmp_path)


def test_its_commands_are_the_gateway_s_and_pass_on_the_docs_examples(tmp_path: Path) -> None:
    unit = service()
    check, run = (shlex.split(unit[key]) for key in ("ExecStartPre", "ExecStart"))
    assert check == [HEADWATER, "gateway", "check-config", "--config", CONFIG]
    args = build_parser().parse_args(run[1:])
    assert args.func is gateway_cli._run and args.config == CONFIG
    spool_dir = Path("/var/lib") / unit["StateDirectory"]
    env = os.environ | {"HEADWATER_GATEWAY_TOKEN": "a-token"}  # what EnvironmentFile sets
    for kind in EXAMPLES:
        config = tmp_path / f"{kind}.yaml"
        config.write_text(example(kind))
        argv = [str(config) if arg == CONFIG else arg for arg in check[1:]]
        done = subprocess.run(
            [sys.executable, "-m", "headwater.cli", *argv],
            capture_output=True, text=True, env=env, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 0, f"{kind}: {done.stderr}"
        # The spool is in the unit's state directory: made by systemd, owned by User=.
        assert Path(json.loads(done.stdout)["spool"]).parent == spool_dir, kind
        # The token comes from gateway.env, the variable the docs tell users to set there.
        assert yaml.safe_load(example(kind))["ingest"]["token_env"] == "HEADWATER_GATEWAY_TOKEN"


def test_the_spool_is_writable_and_a_stop_waits_for_the_drain() -> None:
    unit = service()
    spool_dir = f"/var/lib/{unit['StateDirectory']}"
    assert unit["ProtectSystem"] == "strict" and unit["NoNewPrivileges"] == "yes"
    assert spool_dir in unit["ReadWritePaths"].split()
    assert unit["KillSignal"] == "SIGTERM"
    # On SIGTERM the gateway waits for its frames' answers and a running command, at
    # once; the unit's stop timeout covers both even one after the other.
    defaults = GatewayConfig(target="x:1")
    drain_s = defaults.call_timeout_s + defaults.command_stop_grace_s
    assert float(unit["TimeoutStopSec"]) > drain_s
    # A bad config or a missing connector extra (exit 2) is not restarted in a loop.
    assert unit["Restart"] == "on-failure" and "2" in unit["RestartPreventExitStatus"].split()


def test_the_docs_link_the_file_and_hold_no_copy_of_it() -> None:
    docs = (ROOT / "docs" / "gateway.md").read_text()
    assert "(gateway/headwater-gateway.service)" in docs
    assert "[Service]" not in docs and "ExecStart=" not in docs
