"""The cluster itself: built at its pinned version, isolated from the machine's network,
running pods, and torn down by pid without leaving anything behind."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from scripts.cluster.cluster import NODE, Cluster, wait_for
from scripts.cluster.pins import KUBERNETES, PAUSE_IMAGE, ROOT

pytestmark = [pytest.mark.k8s, pytest.mark.timeout(600)]


def test_the_server_is_the_pinned_release(cluster: Cluster):
    version = json.loads(cluster.api_get("/version"))
    assert version["gitVersion"] == KUBERNETES
    node = json.loads(cluster.kubectl("get", "node", NODE, "-o", "json").stdout)
    assert node["status"]["nodeInfo"]["kubeletVersion"] == KUBERNETES


def test_nothing_leaves_the_machine(cluster: Cluster):
    """The namespace has no default route: only the veth's subnet and the cluster's own
    ranges are reachable from inside."""
    routes = subprocess.run(
        ["ip", "-n", cluster.network.name, "route", "show"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert "default" not in routes
    probe = subprocess.run(
        [*cluster.network.enter(), "ip", "route", "get", "192.0.2.1"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert probe.returncode != 0, probe.stdout
    assert "unreachable" in probe.stderr


def _pod(name: str) -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {
                "containers": [{"name": "main", "image": PAUSE_IMAGE, "imagePullPolicy": "Never"}],
                "terminationGracePeriodSeconds": 5,
            },
        }
    )


def test_a_pod_runs_with_an_address_from_the_pod_range(cluster: Cluster):
    cluster.kubectl("apply", "-f", "-", input=_pod("sandbox-check"))
    cluster.kubectl("wait", "pod/sandbox-check", "--for=condition=Ready", "--timeout=120s",
                    timeout_s=150)  # fmt: skip
    pod = json.loads(cluster.kubectl("get", "pod", "sandbox-check", "-o", "json").stdout)
    prefix = cluster.network.pod_cidr.rsplit(".", 1)[0] + "."
    assert pod["status"]["podIP"].startswith(prefix)
    cluster.kubectl("delete", "pod", "sandbox-check", "--wait=true", timeout_s=90)


def test_stop_by_pid_from_another_process_leaves_nothing_then_starts_again(cluster: Cluster):
    """`cluster.py down` in a process of its own: it knows the cluster only by its state
    file. A pod is running when it stops (its sandbox, mounts, netns and CNI lease must go
    too). Then the session's cluster starts again for the tests after this one."""
    cluster.kubectl("apply", "-f", "-", input=_pod("left-running"))
    cluster.kubectl("wait", "pod/left-running", "--for=condition=Ready", "--timeout=120s",
                    timeout_s=150)  # fmt: skip
    assert cluster.leftovers(), "a running cluster must show up as leftovers"
    down = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "cluster" / "cluster.py"), "down"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert down.returncode == 0, down.stderr
    assert cluster.leftovers() == []
    started = time.monotonic()
    cluster.start()
    assert time.monotonic() - started < 120
    wait_for("node listed", lambda: NODE in cluster.kubectl("get", "nodes").stdout, 30)
