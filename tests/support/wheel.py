"""The production wheel (``headwater``) of this checkout, built offline from a copy.

A copy of what the wheel is built from (pyproject.toml, README.md, src/, services/), so the
build leaves no ``build/`` or egg-info in the checkout; this venv's setuptools builds it
without an index (tests/test_packaging.py installs it, tests/test_layout.py reads it).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def build_wheel(workdir: Path) -> Path:
    """Build the headwater wheel under ``workdir``; return its path."""
    src = workdir / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in ("src", "services"):
        shutil.copytree(ROOT / folder, src / folder, ignore=ignore)
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--disable-pip-version-check",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-q",
            "-w",
            str(workdir / "out"),
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    (path,) = (workdir / "out").glob("headwater-*.whl")
    return path
