#!/usr/bin/env python3
"""``make cluster``: install what the one-machine cluster runs on and build its binaries once.

Debian packages (pins.APT_PACKAGES) are installed with apt when missing. Kubernetes, etcd,
helm and CoreDNS are built with ``go build`` from small wrapper modules that pin each at its
release (pins.BUILDS); the binaries go to .cluster/bin (ignored), Go's module and build
caches are reused, and a component already built at its pinned version is not built again.
Builds run at ``nice -n 19``: they take minutes on two shared cores. Each build's time is
logged and kept in .cluster/build-times.json.

Usage: build.py [--only NAME ...] [--no-apt]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from scripts.cluster.pins import (
    APT_PACKAGES,
    BIN,
    BUILDS,
    HOME,
    IMAGES,
    PAUSE_IMAGE,
    STAGING,
    GoBuild,
)

PAUSE_SOURCE = Path(__file__).resolve().parent / "pause" / "main.go"

#: Go 1.24 is what Kubernetes 1.34 declares.
MIN_GO = (1, 24)


def log(event: str, **fields: object) -> None:
    """One JSON log line on stdout."""
    print(json.dumps({"event": event, **fields}), flush=True)


def fail(message: str) -> None:
    """Bad input or a missing prerequisite: one line, exit 2."""
    print(f"cluster build: {message}", file=sys.stderr)
    sys.exit(2)


def missing_packages() -> list[str]:
    """The Debian packages of APT_PACKAGES that are not installed."""
    result = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Package} ${db:Status-Status}\n", *APT_PACKAGES],
        capture_output=True,
        text=True,
        check=False,
    )
    installed = {
        line.split()[0] for line in result.stdout.splitlines() if line.endswith(" installed")
    }
    return [name for name in APT_PACKAGES if name not in installed]


def install_packages() -> None:
    """Install the missing Debian packages (as root, or through sudo without a prompt)."""
    missing = missing_packages()
    if not missing:
        return
    as_root = [] if os.geteuid() == 0 else ["sudo", "-n"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    started = time.monotonic()
    log("apt_install", packages=missing)
    subprocess.run([*as_root, "apt-get", "update", "-q"], env=env, check=True)
    subprocess.run(
        [*as_root, "apt-get", "install", "-y", "-q", "--no-install-recommends", *missing],
        env=env,
        check=True,
    )
    log("apt_installed", seconds=round(time.monotonic() - started, 1))


def check_go() -> None:
    """Fail unless a Go toolchain new enough for Kubernetes 1.34 is on PATH."""
    if shutil.which("go") is None:
        fail(f"Go >= {'.'.join(map(str, MIN_GO))} is required (https://go.dev/dl)")
    version = subprocess.run(
        ["go", "env", "GOVERSION"], capture_output=True, text=True, check=True
    ).stdout.strip()  # e.g. go1.26.8
    parts = tuple(int(p) for p in version.removeprefix("go").split(".")[:2])
    if parts < MIN_GO:
        fail(f"{version} is too old: Kubernetes 1.34 needs Go >= {'.'.join(map(str, MIN_GO))}")


def staging_replaces(build: GoBuild) -> list[str]:
    """The replace lines a module that requires k8s.io/kubernetes needs.

    k8s.io/kubernetes replaces its staging modules with folders of its own repository, which
    a module that requires it cannot see: point each at its published release instead. The
    sample-* modules are examples that are not published.
    """
    if build.module != "k8s.io/kubernetes":
        return []
    info = json.loads(
        subprocess.run(
            ["go", "mod", "download", "-json", f"{build.module}@{build.version}"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    names = []
    for line in Path(info["GoMod"]).read_text().splitlines():
        left, arrow, right = line.strip().partition("=>")
        if arrow and right.strip().startswith("./staging/"):
            names.append(left.strip())
    return [
        f"\t{name} => {name} {STAGING}" for name in names if not name.startswith("k8s.io/sample-")
    ]


def wrapper_module(build: GoBuild) -> Path:
    """The folder of the module that requires ``build.module`` at its pinned version."""
    folder = HOME / "src" / build.name
    folder.mkdir(parents=True, exist_ok=True)
    replaces = staging_replaces(build)
    lines = [
        f"module headwater.local/cluster/{build.name}",
        "",
        "go 1.24",
        "",
        f"require {build.module} {build.version}",
    ]
    if replaces:
        lines += ["", "replace (", *replaces, ")"]
    # Written afresh for each build: `go build -mod=mod` completes it and its go.sum.
    (folder / "go.mod").write_text("\n".join(lines) + "\n")
    (folder / "go.sum").unlink(missing_ok=True)
    return folder


def stamp(build: GoBuild) -> Path:
    """The file that says ``build`` was built at its pinned version."""
    return BIN / f".{build.name}-{build.version}"


def go_build(build: GoBuild) -> None:
    """Build ``build``'s binaries into BIN: static, stripped, at nice 19."""
    folder = wrapper_module(build)
    env = {**os.environ, "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0"}
    common = ["nice", "-n", "19", "go", "build", "-trimpath"]
    if build.tags:
        common += ["-tags", ",".join(build.tags)]
    common += ["-ldflags", " ".join(("-s", "-w", *build.ldflags))]
    renamed = set(build.rename.values())
    plain = [p for p in build.packages if p not in renamed]
    BIN.mkdir(parents=True, exist_ok=True)
    if plain:
        subprocess.run([*common, "-o", f"{BIN}/", *plain], cwd=folder, env=env, check=True)
    for binary, package in build.rename.items():
        subprocess.run([*common, "-o", str(BIN / binary), package], cwd=folder, env=env, check=True)


def build_all(only: set[str]) -> None:
    """Build what is not built yet (``only``: these alone); keep the times."""
    times_file = HOME / "build-times.json"
    times = json.loads(times_file.read_text()) if times_file.exists() else {}
    for build in BUILDS:
        if only and build.name not in only:
            continue
        if stamp(build).exists():
            log("built_already", name=build.name, version=build.version)
            continue
        log("go_build", name=build.name, version=build.version)
        started = time.monotonic()
        go_build(build)
        seconds = round(time.monotonic() - started, 1)
        for old in BIN.glob(f".{build.name}-*"):
            old.unlink()
        stamp(build).touch()
        times[build.name] = {"version": build.version, "seconds": seconds}
        times_file.write_text(json.dumps(times, indent=2) + "\n")
        log("go_built", name=build.name, version=build.version, seconds=seconds)


def build_pause() -> None:
    """Make the pod sandbox image: one static Go program in an image ``FROM scratch``.

    Saved as an archive that the cluster's containerd imports (no registry to pull from).
    """
    archive = IMAGES / "pause.tar"
    if archive.exists():
        log("built_already", name="pause")
        return
    started = time.monotonic()
    folder = HOME / "src" / "pause"
    folder.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "CGO_ENABLED": "0"}
    subprocess.run(
        ["go", "build", "-trimpath", "-ldflags", "-s -w", "-o", str(folder / "pause"),
         str(PAUSE_SOURCE)],
        cwd=folder, env=env, check=True,
    )  # fmt: skip

    def buildah(*args: str) -> str:
        return subprocess.run(
            ["buildah", *args], capture_output=True, text=True, check=True
        ).stdout.strip()

    container = buildah("from", "scratch")
    try:
        buildah("copy", container, str(folder / "pause"), "/pause")
        buildah("config", "--entrypoint", '["/pause"]', container)
        buildah("commit", container, PAUSE_IMAGE)
    finally:
        buildah("rm", container)
    IMAGES.mkdir(parents=True, exist_ok=True)
    partial = archive.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    buildah("push", PAUSE_IMAGE, f"docker-archive:{partial}:{PAUSE_IMAGE}")
    partial.rename(archive)
    log("built", name="pause", seconds=round(time.monotonic() - started, 1))


def main() -> None:
    """Install the packages, then build."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", default=[], help="build only this component")
    parser.add_argument("--no-apt", action="store_true", help="do not install Debian packages")
    args = parser.parse_args()
    known = {b.name for b in BUILDS} | {"pause"}
    if unknown := set(args.only) - known:
        fail(f"unknown component {', '.join(sorted(unknown))} (known: {', '.join(sorted(known))})")
    if not args.no_apt:
        install_packages()
    check_go()
    build_all(set(args.only))
    if not args.only or "pause" in args.only:
        build_pause()


if __name__ == "__main__":
    main()
