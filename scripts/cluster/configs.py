"""The configuration files of containerd, the CNI bridge, kubelet, kube-proxy and CoreDNS.

Each setting that is not a default says why it is set.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from scripts.cluster.network import Network
from scripts.cluster.pins import PAUSE_IMAGE

#: The CNI network's name: containerd caches results as /var/lib/cni/results/<name>-*.
CNI_NETWORK = "headwater-k8s"


def containerd(root: Path, state: Path, socket: Path, cni_conf: Path) -> str:
    """The config.toml of containerd: its folders and socket are ours, not the machine's."""
    # containerd 1.6 (Debian 12) speaks config version 2.
    return f"""version = 2
root = "{root}"
state = "{state}"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
                    "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper",
                    "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = "{socket}"

[ttrpc]
  address = "{socket}.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "{state}/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  # The sandbox lacks CAP_SYS_RESOURCE: without this runc fails to lower oom_score_adj
  # ("can't get final child's PID from pipe: EOF").
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{cni_conf}"
"""


def cni(network: Network, ipam_dir: Path) -> str:
    """The pod network: a bridge in the namespace."""
    # Pods on one bridge with the node as their gateway; no masquerading: the host routes the
    # pod range back over the veth, so a broker on the host sees pods' own addresses.
    return json.dumps(
        {
            "cniVersion": "0.4.0",
            "name": CNI_NETWORK,
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": "cni0",
                    "isGateway": True,
                    "ipMasq": False,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": network.pod_cidr}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                        "dataDir": str(ipam_dir),
                    },
                },
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        },
        indent=2,
    )


def kubelet(network: Network, socket: Path) -> str:
    """The KubeletConfiguration."""
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        # Kubernetes 1.34 still runs on cgroup v1 when told to; no systemd here.
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "containerRuntimeEndpoint": f"unix://{socket}",
        # The API server reaches kubelet (logs, exec) only from inside the namespace.
        "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"},
        "address": network.node_ip,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "clusterDomain": "cluster.local",
        "clusterDNS": [network.dns_ip],
        # No host resolver: the namespace has no route out; pods get the cluster DNS only.
        "resolvConf": "",
        "failSwapOn": False,
        # A shared build machine: do not evict or collect images over its disk use.
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False,
    }
    return yaml.safe_dump(config)


def kube_proxy(network: Network, kubeconfig: Path, node: str) -> str:
    """The KubeProxyConfiguration: iptables mode."""
    config = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "mode": "iptables",
        "hostnameOverride": node,
        "clusterCIDR": network.pod_cidr,
        # Replies to service traffic come back through the node, whoever sent it.
        "iptables": {"masqueradeAll": True},
        # The conntrack sysctls can only be written from the initial namespace: leave them.
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
        },
        "metricsBindAddress": "127.0.0.1:10249",
        "healthzBindAddress": "127.0.0.1:10256",
    }
    return yaml.safe_dump(config)


def corefile(network: Network, kubeconfig: Path) -> str:
    """CoreDNS's Corefile: the cluster's names at the cluster DNS address."""
    # Cluster names only: no `forward`, there is nowhere to forward to.
    return f"""cluster.local:53 in-addr.arpa:53 {{
    bind {network.dns_ip}
    errors
    kubernetes cluster.local in-addr.arpa {{
        kubeconfig {kubeconfig} headwater
        pods insecure
    }}
    cache 5
}}
"""
