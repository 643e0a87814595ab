#!/usr/bin/env python3
"""Build the images with podman: ``make images``.

The two the chart deploys (ingest and enricher, ``services/*/Dockerfile``) and the edge
gateway's (``images/gateway/Dockerfile``), which runs on the factory side, not in the chart.

Where a container registry is reachable, the Dockerfiles' own bases are used (the official
Python, Spark and Maven images). Where none is, as on this project's machines, the bases are
made here from Debian's packages: ``mmdebstrap`` builds a Debian bookworm root file system
(Python 3.11, OpenJDK 17, Maven), ``podman import`` turns it into an image, and a Spark base
adds Spark itself from PyPI's ``pyspark`` distribution (images/spark-base/Dockerfile). Either
way the same Dockerfiles build the images; only their base build arguments differ.

Each base is tagged with a hash of its recipe, so a second run reuses it; podman's layer
cache does the same for the images. The images are tagged with the names and the tag the
chart pulls (helm/headwater/values.yaml, the chart's appVersion); the gateway's beside them,
with the same registry and tag.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "helm" / "headwater"
#: podman as the project's machines need it: runc, no systemd to manage cgroups.
PODMAN = ["podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs"]
#: Build and run containers with limits below the host's (podman refuses to raise them) and
#: on the host's network (package registries through the host's route, a broker on loopback).
CONTAINER_LIMITS = ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"]
NETWORK = ["--network", "host"]
#: Probed to decide whether the Dockerfiles' upstream bases can be pulled.
REGISTRY_PROBE = "https://registry-1.docker.io/v2/"
DEBIAN_SOURCES = [
    "deb http://deb.debian.org/debian bookworm main",
    "deb http://deb.debian.org/debian bookworm-updates main",
    "deb http://deb.debian.org/debian-security bookworm-security main",
]
#: The Debian bases: packages, and a hook run in the new root. The Python base mimics the
#: official python image: a ``python``/``pip`` first on PATH that pip may install into (a
#: virtualenv: Debian's own python3 refuses system-wide pip installs, PEP 668).
_PY_PATH = "/opt/python/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DEBIAN_BASES = {
    "python": {
        "packages": ["python3", "python3-venv", "ca-certificates", "passwd"],
        "hook": 'chroot "$1" python3 -m venv /opt/python',
        "env": {"PATH": _PY_PATH},
    },
    "maven": {
        "packages": ["openjdk-17-jdk-headless", "maven", "ca-certificates"],
        "hook": "",
        "env": {},
    },
    "spark-os": {
        "packages": [
            *("python3", "python3-venv", "ca-certificates", "passwd"),
            # tini: PID 1 of Spark's Kubernetes pods (images/spark-base/entrypoint.sh).
            *("openjdk-17-jre-headless", "procps", "tini"),
        ],
        "hook": 'chroot "$1" python3 -m venv /opt/python',
        "env": {"PATH": _PY_PATH},
    },
}
BASE_REPO = "localhost/headwater-base"
#: The base build arguments each Dockerfile declares, and the made base that stands in for
#: each upstream one (tests/test_images_script.py checks the Dockerfiles declare them).
BASE_ARGS = {
    "ingest": {"PYTHON_IMAGE": "python"},
    "enricher": {"PYTHON_IMAGE": "python", "MAVEN_IMAGE": "maven", "SPARK_IMAGE": "spark"},
    "gateway": {"PYTHON_IMAGE": "python"},
}
#: Each image's Dockerfile: the services' beside their code, the gateway's in images/ (its
#: code is the headwater.gateway package under src/).
DOCKERFILES = {
    "ingest": ROOT / "services" / "ingest" / "Dockerfile",
    "enricher": ROOT / "services" / "enricher" / "Dockerfile",
    "gateway": ROOT / "images" / "gateway" / "Dockerfile",
}


def log(message: str) -> None:
    """Progress on stderr; stdout carries only the figures (--json)."""
    print(f"images: {message}", file=sys.stderr, flush=True)


def chart_images() -> dict[str, str]:
    """The image references the chart deploys: ``repository:tag`` by part."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    tag_ingest = values["image"]["tag"] or chart["appVersion"]
    tag_enricher = values["enricher"]["image"]["tag"] or chart["appVersion"]
    return {
        "ingest": f"{values['image']['repository']}:{tag_ingest}",
        "enricher": f"{values['enricher']['image']['repository']}:{tag_enricher}",
    }


def image_refs() -> dict[str, str]:
    """Every image's reference: the chart's two, and the gateway's in the same registry."""
    refs = chart_images()
    repository, tag = refs["ingest"].rsplit(":", 1)
    refs["gateway"] = f"{repository.rsplit('/', 1)[0]}/headwater-gateway:{tag}"
    return refs


def versions() -> dict[str, str]:
    """Spark and py4j versions from constraints.txt (what the enricher was tested with)."""
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        name, sep, version = line.partition("==")
        if sep:
            pins[name.strip().lower()] = version.strip()
    return {"spark": pins["pyspark"], "py4j": pins["py4j"]}


def registry_reachable(timeout_s: float = 5.0) -> bool:
    """True when Docker Hub answers at all (401 is its normal answer to an anonymous probe)."""
    try:
        urllib.request.urlopen(REGISTRY_PROBE, timeout=timeout_s)
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False
    return True


def podman(*args: str, capture: bool = False) -> str:
    """Run podman; raise with its output when it fails."""
    done = subprocess.run(
        [*PODMAN, *args],
        stdin=subprocess.DEVNULL,
        # Build output is progress: stderr, so that stdout is the figures alone.
        stdout=subprocess.PIPE if capture else sys.stderr,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"images: podman {' '.join(args[:2])} failed (exit {done.returncode})")
    return done.stdout or ""


def image_exists(ref: str) -> bool:
    """True when ``ref`` is in local storage."""
    return subprocess.run([*PODMAN, "image", "exists", ref], check=False).returncode == 0


def image_size(ref: str) -> int:
    """The image's size in bytes, as podman reports it (uncompressed layers)."""
    return int(podman("image", "inspect", "--format", "{{.Size}}", ref, capture=True).strip())


def host_trust_args(dockerfile: str) -> list[str]:
    """Build-time access to the host's CA bundle, for a TLS-intercepting proxy's certificate.

    The certificates are mounted for the build's RUN steps only and named by build
    arguments (PIP_CERT, MAVEN_OPTS) that the Dockerfiles declare without a default: nothing
    of them stays in an image. Without a host bundle, pip and Maven use their own.
    """
    args = []
    if "\nARG PIP_CERT\n" in dockerfile and Path("/etc/ssl/certs/ca-certificates.crt").exists():
        args += ["--build-arg", "PIP_CERT=/run/host-certs/ca-certificates.crt"]
    if "\nARG MAVEN_OPTS\n" in dockerfile and Path("/etc/ssl/certs/java/cacerts").exists():
        trust = "-Djavax.net.ssl.trustStore=/run/host-certs/java/cacerts"
        args += ["--build-arg", f"MAVEN_OPTS={trust}"]
    # Only the arguments a Dockerfile declares (podman warns about others).
    return ["--volume", "/etc/ssl/certs:/run/host-certs:ro", *args] if args else []


def debian_base(name: str) -> str:
    """Make (once) the Debian base ``name`` with mmdebstrap and return its reference."""
    recipe = DEBIAN_BASES[name]
    digest = hashlib.sha256(
        json.dumps([recipe, DEBIAN_SOURCES], sort_keys=True).encode()
    ).hexdigest()[:12]
    ref = f"{BASE_REPO}-{name}:bookworm-{digest}"
    if image_exists(ref):
        return ref
    if shutil.which("mmdebstrap") is None:
        raise SystemExit(
            "images: no registry is reachable and mmdebstrap is missing: see docs/deploy.md"
        )
    log(f"making {ref} with mmdebstrap")
    with tempfile.TemporaryDirectory(prefix="headwater-base-") as tmp:
        tarball = Path(tmp) / "rootfs.tar"
        cmd = ["mmdebstrap", "--quiet", "--variant=minbase"]
        cmd += ["--include=" + ",".join(recipe["packages"])]
        # Smaller bases: no apt lists or caches (the Dockerfiles run apt-get update first).
        cmd += ['--customize-hook=rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*']
        if recipe["hook"]:
            cmd += [f"--customize-hook={recipe['hook']}"]
        cmd += ["bookworm", str(tarball), *DEBIAN_SOURCES]
        subprocess.run(cmd, check=True, stdin=subprocess.DEVNULL, stdout=sys.stderr)
        changes = []
        for key, value in recipe["env"].items():
            changes += ["--change", f"ENV {key}={value}"]
        podman("import", *changes, str(tarball), ref, capture=True)
    return ref


def spark_base(os_base: str, pins: dict[str, str]) -> str:
    """Build the Spark base (images/spark-base/Dockerfile) on ``os_base``."""
    ref = f"{BASE_REPO}-spark:{pins['spark']}-bookworm"
    build(
        ref,
        ROOT / "images" / "spark-base" / "Dockerfile",
        {
            "OS_BASE": os_base,
            "SPARK_VERSION": pins["spark"],
            "PY4J_VERSION": pins["py4j"],
        },
    )
    return ref


def build(ref: str, dockerfile: Path, build_args: dict[str, str], context: Path = ROOT) -> float:
    """``podman build`` from ``context`` (the repository root); return the seconds it took."""
    text = dockerfile.read_text()
    args = ["build", "--layers", "--file", str(dockerfile), "--tag", ref]
    args += [*NETWORK, *CONTAINER_LIMITS, *host_trust_args(text)]
    if "\nHEALTHCHECK " in text:
        # The OCI image format has no health check: podman would drop it with a warning.
        args += ["--format", "docker"]
    for key, value in build_args.items():
        args += ["--build-arg", f"{key}={value}"]
    log(f"building {ref} from {dockerfile.relative_to(ROOT)}")
    started = time.monotonic()
    podman(*args, str(context))
    return time.monotonic() - started


def base_args(parts: list[str], bases: str) -> dict[str, dict[str, str]]:
    """The base build arguments of each part: none upstream, the made bases otherwise."""
    if bases == "upstream" or (bases == "auto" and registry_reachable()):
        log("the Dockerfiles' own bases (a registry is reachable, or --bases upstream)")
        return {part: {} for part in parts}
    log("bases made here with mmdebstrap (no registry is reachable, or --bases debian)")
    made: dict[str, str] = {}

    def base(kind: str) -> str:
        if kind not in made:
            made[kind] = (
                spark_base(debian_base("spark-os"), versions())
                if kind == "spark"
                else debian_base(kind)
            )
        return made[kind]

    return {part: {arg: base(kind) for arg, kind in BASE_ARGS[part].items()} for part in parts}


def main(argv: list[str] | None = None) -> int:
    """Build the images; print the figures."""
    parser = argparse.ArgumentParser(
        prog="make images",
        description=(
            "Build the ingest and enricher images (services/*/Dockerfile) and the edge gateway's "
            "(images/gateway/Dockerfile) with podman; tag the first two as the chart names "
            "them, the gateway's beside them. Bases: the Dockerfiles' upstream images when a "
            "registry is reachable, else Debian bookworm bases made here with mmdebstrap "
            "(cached). Prints the build times and image sizes."
        ),
    )
    parser.add_argument(
        "--bases",
        choices=["auto", "upstream", "debian"],
        default="auto",
        help="where the bases come from (default: auto, upstream if a registry answers)",
    )
    parser.add_argument(
        "--only", choices=list(DOCKERFILES), action="append", help="build only this image"
    )
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON line")
    args = parser.parse_args(argv)
    if shutil.which("podman") is None:
        print("images: podman is required (apt-get install podman buildah mmdebstrap runc)")
        return 2
    parts = args.only or list(DOCKERFILES)
    refs = image_refs()
    started = time.monotonic()
    bases = base_args(parts, args.bases)
    figures: dict[str, object] = {"bases_s": round(time.monotonic() - started, 1)}
    for part in parts:
        seconds = build(refs[part], DOCKERFILES[part], bases[part])
        figures[part] = {
            "image": refs[part],
            "build_s": round(seconds, 1),
            "size_mb": round(image_size(refs[part]) / 1e6),
        }
    if args.json:
        print(json.dumps(figures))
    else:
        for part in parts:
            fig = figures[part]
            assert isinstance(fig, dict)
            print(f"{fig['image']:<48} built in {fig['build_s']:>6.1f} s  {fig['size_mb']:>5} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
