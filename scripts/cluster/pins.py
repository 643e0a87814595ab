"""What the one-machine cluster is made of: pinned versions, packages, where binaries live.

Read by build.py (``make cluster``) and by the cluster itself.

Why these versions: Kubernetes 1.34 is the newest line that still runs on cgroup v1 (1.35
refuses by default) and on containerd 1.x (Debian 12 ships 1.6; 1.36 wants containerd 2).
etcd is built rather than taken from Debian (3.4.23): Spark's fabric8 client watches with
``RequestWatchProgress``, which etcd 3.4 disables, and etcd >= 3.5.13 serves it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: Built binaries and the wrapper modules they are built from (ignored by git). Go's own
#: module and build caches stay where Go keeps them, shared by every checkout.
HOME = Path(os.environ.get("HEADWATER_CLUSTER_HOME", ROOT / ".cluster"))
BIN = HOME / "bin"
#: The pod sandbox image, built by build.py (scripts/cluster/pause) and imported by name.
PAUSE_IMAGE = "localhost/headwater/pause:3.10"
#: Image archives made here for the cluster's containerd (the pause image).
IMAGES = HOME / "images"

KUBERNETES = "v1.34.4"
#: The staging modules k8s.io/kubernetes replaces with local folders are published as
#: k8s.io/<name> v0.<minor>.<patch>.
STAGING = "v0.34.4"

#: From Debian: the container runtime, the CNI plugins (bridge, host-local, portmap), what
#: kube-proxy and port forwarding call, and what ``make images`` builds the images with.
APT_PACKAGES = (
    "containerd",
    "runc",
    "containernetworking-plugins",
    "iptables",
    "conntrack",
    "socat",
    "iproute2",
    "util-linux",
    "buildah",
    "podman",
    "mmdebstrap",
)


@dataclass(frozen=True)
class GoBuild:
    """One ``go build`` from a wrapper module that requires ``module`` at ``version``."""

    name: str
    module: str
    version: str
    packages: tuple[str, ...]
    #: binary name -> package, where Go's default name is not the one wanted.
    rename: dict[str, str] = field(default_factory=dict)
    ldflags: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()


def _version_flags(package: str, version: str) -> tuple[str, ...]:
    major, minor = version.lstrip("v").split(".")[:2]
    values = {
        "gitVersion": version,
        "gitMajor": major,
        "gitMinor": minor,
        "gitTreeState": "clean",
        "buildDate": "2026-02-10T12:53:36Z",  # the release's module time: reproducible
    }
    return tuple(f"-X {package}.{key}={value}" for key, value in values.items())


BUILDS = (
    GoBuild(
        name="kubernetes",
        module="k8s.io/kubernetes",
        version=KUBERNETES,
        packages=tuple(
            f"k8s.io/kubernetes/cmd/{cmd}"
            for cmd in (
                "kube-apiserver",
                "kube-controller-manager",
                "kube-scheduler",
                "kubelet",
                "kube-proxy",
                "kubectl",
            )
        ),
        # Without gitVersion the server says v0.0.0-master and a chart's kubeVersion fails.
        ldflags=_version_flags("k8s.io/component-base/version", KUBERNETES)
        + _version_flags("k8s.io/client-go/pkg/version", KUBERNETES),
        tags=("providerless",),
    ),
    GoBuild(
        name="etcd",
        module="go.etcd.io/etcd/server/v3",
        version="v3.6.16",
        packages=("go.etcd.io/etcd/server/v3",),
        rename={"etcd": "go.etcd.io/etcd/server/v3"},
        ldflags=("-X go.etcd.io/etcd/api/v3/version.GitSHA=v3.6.16",),
    ),
    GoBuild(
        name="helm",
        module="helm.sh/helm/v3",
        version="v3.22.0",
        packages=("helm.sh/helm/v3/cmd/helm",),
        ldflags=("-X helm.sh/helm/v3/internal/version.version=v3.22.0",),
    ),
    GoBuild(
        name="coredns",
        module="github.com/coredns/coredns",
        version="v1.14.7",
        packages=("github.com/coredns/coredns",),
    ),
)
