"""Installable parts: each extra installs what its part needs and nothing heavy besides.

The wheel is built once from this checkout. ``gateway`` and ``subscriber`` are installed
for real into fresh virtualenvs (pip with constraints.txt; PyPI through pip and its cache,
so repeats take seconds) and their public API imported there; the heavy extras are
resolved with ``pip install --dry-run --report`` only. Bounded: < 3 min in all.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.support.wheel import build_wheel

pytestmark = pytest.mark.packaging

ROOT = Path(__file__).resolve().parents[1]
CONSTRAINTS = ROOT / "constraints.txt"
#: What a gateway or subscriber host must never get.
HEAVY = {"pyspark", "kubernetes", "pandas", "pyarrow", "numpy", "pint", "py4j"}
#: The public API of each light part, imported in its fresh venv.
PUBLIC_API = {
    "gateway": "from headwater.gateway import GatewayClient, GatewayConfig, Spool, DeliveryReport",
    "subscriber": "from headwater.subscriber import Subscriber, SubscriberSettings, MemoryDedup",
}


def pip(*args: str, timeout: float = 150) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The headwater wheel of this checkout (built offline with this venv's setuptools)."""
    return build_wheel(tmp_path_factory.mktemp("wheel"))


def requirement(wheel: Path, extras: str) -> str:
    return f"headwater[{extras}] @ {wheel.as_uri()}"


@pytest.mark.parametrize("extra", sorted(PUBLIC_API))
def test_light_extra_installs_into_a_fresh_venv_without_heavy_parts(tmp_path, wheel, extra):
    venv = tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60
    )
    python = venv / "bin" / "python"
    installed = pip(
        "--python",
        str(python),
        "install",
        "-q",
        "-c",
        str(CONSTRAINTS),
        requirement(wheel, extra),
    )
    assert installed.returncode == 0, installed.stderr
    listed = pip("--python", str(python), "list", "--format", "json")
    names = {canonical(p["name"]) for p in json.loads(listed.stdout)}
    assert not names & HEAVY, f"headwater[{extra}] brought {sorted(names & HEAVY)}"
    assert "confluent-kafka" not in names
    probe = (
        f"{PUBLIC_API[extra]}\n"
        "import sys\n"
        "from headwater.cli import build_parser\n"
        "build_parser()\n"
        "print(sorted({m.split('.')[0] for m in sys.modules}))\n"
    )
    ran = subprocess.run(
        [str(python), "-c", probe], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert ran.returncode == 0, ran.stderr
    loaded = set(json.loads(ran.stdout.replace("'", '"')))
    assert not loaded & {"pyspark", "kubernetes", "confluent_kafka"}, loaded
    # The command works too, and says which extra the other groups need.
    version = subprocess.run(
        [str(venv / "bin" / "headwater"), "--version"], capture_output=True, text=True, timeout=60
    )
    assert version.stdout.strip() == "headwater 0.1.0", version.stderr
    enricher = subprocess.run(
        [str(venv / "bin" / "headwater"), "enricher", "run"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert enricher.returncode == 2 and "Traceback" not in enricher.stderr, enricher.stderr
    # The dev tooling is not in the wheel (headwater-dev, dev/): listed, and says how to get it.
    listing = subprocess.run(
        [str(venv / "bin" / "headwater"), "--help"], capture_output=True, text=True, timeout=60
    )
    assert re.search(r"devstack\s+\(not installed: headwater-dev; make install", listing.stdout)
    devstack = subprocess.run(
        [str(venv / "bin" / "headwater"), "devstack", "run", "--duration", "5"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert devstack.returncode == 2, devstack.stderr
    assert devstack.stderr.strip() == (
        "headwater devstack: needs headwater-dev, the dev tooling (not installed): "
        "make install, or pip install -e ./dev in a checkout"
    )


def resolve(wheel: Path, extras: str) -> set[str]:
    """The distributions ``pip install headwater[extras]`` would install (resolved only)."""
    result = pip(
        "install",
        "--dry-run",
        "--ignore-installed",
        "-q",
        "--report",
        "-",
        "-c",
        str(CONSTRAINTS),
        requirement(wheel, extras),
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    return {canonical(item["metadata"]["name"]) for item in report["install"]}


@pytest.mark.parametrize(
    ("extras", "present", "absent"),
    [
        ("ingest", {"grpcio", "confluent-kafka", "aiokafka", "pyyaml"}, HEAVY),
        ("enricher", {"pyspark", "pandas", "pyarrow", "pint"}, {"kubernetes", "aiokafka"}),
        ("ops", {"confluent-kafka", "kubernetes", "pyyaml"}, {"pyspark", "pandas", "pyarrow"}),
    ],
)
def test_heavy_extras_resolve_with_the_constraints(wheel, extras, present, absent):
    names = resolve(wheel, extras)
    assert present <= names, sorted(present - names)
    assert not names & absent, sorted(names & absent)


def test_constraints_pin_every_library_and_pyproject_pins_only_what_must_match():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    texts = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        texts += extra
    names = {canonical(re.split(r"[\[<>=!~; ]", t, maxsplit=1)[0]) for t in texts}
    pins = {
        canonical(line.split("==")[0])
        for line in CONSTRAINTS.read_text().splitlines()
        if line and not line.startswith("#")
    }
    assert names - {"headwater"} <= pins, "run `make constraints`"
    # [dev] is everything (make install, .ci/run): its resolution with the constraints is
    # what `make install` does, so only its contents are checked here (resolving it is slow).
    parts = set(project["optional-dependencies"]) - {"dev"}
    every_part = f"headwater[{','.join(sorted(parts))}]"
    assert every_part in project["optional-dependencies"]["dev"]
    # headwater-dev (dev/, make install) runs every part and brings no library of its own.
    dev_tooling = tomllib.loads((ROOT / "dev" / "pyproject.toml").read_text())["project"]
    assert dev_tooling["dependencies"] == [every_part]
    # Exact pins in pyproject only where a version must match something outside Python:
    # pyspark (Spark's JVM) and the two tool wheels the lint and chart tests rely on.
    exact = {canonical(t.split("==")[0]) for t in texts if "==" in t}
    assert exact <= {"pyspark", "buf-bin", "helm-python-sdk", "kubernetes-validate"}, exact
