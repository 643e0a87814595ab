"""A real one-node Kubernetes for the ``k8s`` tests (scripts/cluster, ``make cluster``).

Marker ``k8s``: deselected by default like ``images``; ``make test-k8s`` and ``.ci/run`` run
it. The cluster needs root (it makes a network namespace, mounts and runs containerd) and a
kernel with network namespaces: where either is missing the tests are skipped, saying which
(detected with ``os.geteuid()`` and a probe ``unshare --net true``). Where the machine can
run it but the binaries are not built, they fail: run ``make cluster``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator

import pytest

from scripts.cluster.cluster import COMPONENTS, Cluster
from scripts.cluster.pins import BIN, IMAGES
from tests.k8s.live import build_images
from tests.k8s.release import Install, installed_release
from tests.support.process_guard import session_owns


def _cannot_run() -> str | None:
    if os.geteuid() != 0:
        return "the cluster needs root (network namespace, mounts, containerd)"
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return "the cluster needs util-linux's unshare and iproute2's ip"
    probe = subprocess.run(["unshare", "--net", "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        return f"no network namespaces here: unshare --net: {probe.stderr.decode().strip()}"
    return None


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    if reason := _cannot_run():
        pytest.skip(reason)
    built = [*COMPONENTS[1:], "kubectl", "helm"]
    missing = [name for name in built if not (BIN / name).exists()]
    if not (IMAGES / "pause.tar").exists():
        missing.append("pause image")
    if missing:
        pytest.fail(f"not built: {', '.join(missing)}; run `make cluster`")
    cluster = Cluster()
    # Its components, and the pods they run (started, deleted and restarted by tests), are
    # the session's cluster's, never a test's leftovers (tests/support/process_guard.py).
    session_owns(cluster.processes)
    cluster.start()
    cluster.import_image(IMAGES / "pause.tar")
    yield cluster
    cluster.stop()
    assert not cluster.leftovers(), "the teardown left things behind"


@pytest.fixture(scope="session")
def images(cluster: Cluster) -> dict[str, float]:
    """Both images built (``make images``, cached) and imported into the cluster's containerd."""
    figures = build_images()
    seconds = {}
    for part in ("ingest", "enricher"):
        started = time.monotonic()
        cluster.import_podman_image(figures[part]["image"])
        seconds[f"import_{part}_s"] = round(time.monotonic() - started, 1)
    return seconds


@pytest.fixture(scope="module")
def installed(
    cluster: Cluster, images: dict[str, float], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Install]:
    """The chart installed for this module's tests (tests/k8s/release.py)."""
    with installed_release(cluster, images, tmp_path_factory.mktemp("release")) as install:
        yield install
