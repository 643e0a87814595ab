"""``make images`` without building: its --help, and that its build arguments reach the bases.

The builds themselves are tests/images (marker ``images``). These checks are cheap and run
in every ``make test``: a base argument renamed in a Dockerfile would otherwise be ignored
by podman with a warning, and the build would try to pull the upstream base.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "images.py"


def _images():
    import importlib.util

    spec = importlib.util.spec_from_file_location("images", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_help():
    shown = subprocess.run(
        [sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, timeout=60
    )
    assert shown.returncode == 0 and "usage: make images" in shown.stdout
    assert "--bases {auto,upstream,debian}" in shown.stdout


@pytest.mark.parametrize("part", ["ingest", "enricher", "gateway"])
def test_each_base_argument_is_a_base_of_the_dockerfile(part: str):
    dockerfile = _images().DOCKERFILES[part].read_text()
    before_first_from = dockerfile.split("\nFROM ", 1)[0]
    for arg in _images().BASE_ARGS[part]:
        assert re.search(rf"^ARG {arg}=\S+", before_first_from, re.M), arg  # upstream default
        assert re.search(rf"^FROM \$\{{{arg}\}}( |$)", dockerfile, re.M), arg


def test_the_spark_base_takes_what_the_script_passes():
    dockerfile = (ROOT / "images" / "spark-base" / "Dockerfile").read_text()
    for arg in ("OS_BASE", "SPARK_VERSION", "PY4J_VERSION"):
        assert re.search(rf"^ARG {arg}$", dockerfile, re.M), arg


def test_images_are_tagged_with_the_version_they_hold():
    """The chart's tag (its appVersion) is the version of the wheel the images install."""
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    refs = _images().image_refs()
    assert refs == {
        "ingest": f"ghcr.io/headwater-dev/headwater-ingest:{version}",
        "enricher": f"ghcr.io/headwater-dev/headwater-enricher:{version}",
        "gateway": f"ghcr.io/headwater-dev/headwater-gateway:{version}",
    }
