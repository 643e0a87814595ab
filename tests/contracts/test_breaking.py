"""Contract governance: the contracts stay compatible with the released baseline image.

``buf breaking`` (``FILE`` rules from buf.yaml) compares proto/ with the committed image of
the last released contracts. The check itself is proved to bite: a copy of proto/ with a
breaking edit must fail it, an additive edit must pass.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from google.protobuf import descriptor_pb2

ROOT = Path(__file__).resolve().parents[2]
BUF = Path(sys.executable).parent / "buf"
BASELINE = ROOT / "proto" / "baseline" / "headwater-v1.binpb"
DEVICE_PROTO = Path("proto/headwater/device/v1/device_message.proto")


def breaking(workspace: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BUF), "breaking", "--against", str(BASELINE)],
        cwd=workspace,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def copy_workspace(tmp_path: Path) -> Path:
    """The module (buf.yaml and proto/, baseline left out) in a folder of its own."""
    workspace = tmp_path / "ws"
    shutil.copytree(ROOT / "proto", workspace / "proto", ignore=shutil.ignore_patterns("baseline"))
    shutil.copy(ROOT / "buf.yaml", workspace / "buf.yaml")
    return workspace


def test_baseline_holds_the_released_v1_packages():
    image = descriptor_pb2.FileDescriptorSet.FromString(BASELINE.read_bytes())
    packages = {f.package for f in image.file}
    assert {
        "headwater.device.v1",
        "headwater.ingest.v1",
        "headwater.events.v1",
        "headwater.master.v1",
    } <= packages


def test_contracts_are_compatible_with_the_baseline():
    done = breaking(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_breaking_change_fails_the_check(tmp_path: Path):
    workspace = copy_workspace(tmp_path)
    proto = workspace / DEVICE_PROTO
    text = proto.read_text()
    assert "uint64 sequence = 4;" in text
    proto.write_text(text.replace("uint64 sequence = 4;", "uint64 sequence = 40;"))
    done = breaking(workspace)
    assert done.returncode != 0
    assert "device_message.proto" in done.stdout and "4" in done.stdout, done.stdout


def test_an_additive_change_passes(tmp_path: Path):
    workspace = copy_workspace(tmp_path)
    proto = workspace / DEVICE_PROTO
    text = proto.read_text()
    assert "uint64 sequence = 4;" in text
    added = "uint64 sequence = 4;\n  // firmware is the device's firmware.\n  string firmware = 99;"
    proto.write_text(text.replace("uint64 sequence = 4;", added))
    done = breaking(workspace)
    assert done.returncode == 0, done.stdout + done.stderr
