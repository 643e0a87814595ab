"""The Protobuf contracts: buf lint clean, generated code up to date, packaging complete."""

from __future__ import annotations

import filecmp
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUF = shutil.which("buf") or str(Path(sys.executable).parent / "buf")


def test_buf_lint_is_clean():
    result = subprocess.run([BUF, "lint"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_buf_build_succeeds(tmp_path):
    result = subprocess.run(
        [BUF, "build", "-o", str(tmp_path / "image.binpb")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "image.binpb").stat().st_size > 0


def test_generated_code_is_up_to_date(tmp_path):
    out = tmp_path / "proto"
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "generate_protos.py"), "--out", str(out)],
        check=True,
        timeout=120,
    )
    committed = ROOT / "src" / "headwater" / "proto"
    stale = []
    for new in out.rglob("*"):
        if new.is_file():
            old = committed / new.relative_to(out)
            if not old.exists() or not filecmp.cmp(new, old, shallow=False):
                stale.append(str(new.relative_to(out)))
    extra = [
        str(p.relative_to(committed))
        for p in committed.rglob("*")
        if p.is_file()
        and "__pycache__" not in p.parts
        and not (out / p.relative_to(committed)).exists()
    ]
    assert not stale and not extra, (
        f"generated code is stale (run `make protos`): changed {stale}, extra {extra}"
    )


def test_every_package_is_listed_in_pyproject():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    roots = {name: ROOT / path for name, path in config["package-dir"].items()}
    found = set()
    for name, root in roots.items():
        for init in root.rglob("__init__.py"):
            rel = init.parent.relative_to(root).parts
            found.add(".".join((name, *rel)) if rel else name)
    missing = found - listed
    assert not missing, f"add these packages to [tool.setuptools] packages: {sorted(missing)}"


@pytest.mark.parametrize(
    "module",
    [
        "headwater.proto.device.v1.device_message_pb2",
        "headwater.proto.ingest.v1.ingest_service_pb2_grpc",
        "headwater.proto.events.v1.completion_pb2",
        "headwater.proto.master.v1.device_master_pb2",
    ],
)
def test_generated_modules_import(module):
    __import__(module)
