"""The cluster's network: a namespace of its own with no default route, and one veth pair.

Nothing in it can leave the machine; the host reaches the node, the pods
and the services through routes over the veth, and pods reach the host side of the veth
(where a broker outside the cluster listens).

The service range has no device of its own (kube-proxy's iptables rules answer for it), but
a packet the node sends must find a route before those rules see it, and this kernel has no
``dummy`` links: a port-less bridge holds the route and the cluster DNS address.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

NETNS_DIR = Path("/var/run/netns")


@dataclass(frozen=True)
class Network:
    """The namespace, the veth pair and the address ranges."""

    name: str = "headwater-k8s"
    host_link: str = "hwk8s0"
    node_link: str = "hwk8s1"
    host_ip: str = "10.213.0.1"
    node_ip: str = "10.213.0.2"
    link_prefix: int = 24
    pod_cidr: str = "10.214.0.0/24"
    service_cidr: str = "10.215.0.0/24"
    dns_ip: str = "10.215.1.10"
    #: Routed from the host to the node: the service range and the DNS address together.
    service_route: str = "10.215.0.0/16"

    @property
    def path(self) -> Path:
        """The namespace's file (``ip netns`` names)."""
        return NETNS_DIR / self.name

    @property
    def api_server(self) -> str:
        """The API server's URL: the node's address, reachable from the host."""
        return f"https://{self.node_ip}:6443"

    def exists(self) -> bool:
        """True while the namespace exists."""
        return self.path.exists()

    def enter(self) -> list[str]:
        """The prefix that runs a command in the namespace.

        ``nsenter --net`` rather than ``ip netns exec``: the latter makes a private mount
        namespace, which would hide kubelet's volume mounts from containerd.
        """
        return ["nsenter", f"--net={self.path}", "--"]

    def create(self) -> None:
        """Make the namespace, the veth pair, the routes both ways and the sysctls."""
        ip = ["ip"]
        ns = ["ip", "-n", self.name]
        steps = [
            [*ip, "netns", "add", self.name],
            [*ip, "link", "add", self.host_link, "type", "veth", "peer", "name", self.node_link],
            [*ip, "link", "set", self.node_link, "netns", self.name],
            [*ip, "addr", "add", f"{self.host_ip}/{self.link_prefix}", "dev", self.host_link],
            [*ip, "link", "set", self.host_link, "up"],
            [*ns, "link", "set", "lo", "up"],
            [*ns, "addr", "add", f"{self.node_ip}/{self.link_prefix}", "dev", self.node_link],
            [*ns, "link", "set", self.node_link, "up"],
            [*ns, "link", "add", "svc0", "type", "bridge"],
            [*ns, "link", "set", "svc0", "up"],
            [*ns, "addr", "add", f"{self.dns_ip}/32", "dev", "svc0"],
            [*ns, "route", "add", self.service_cidr, "dev", "svc0"],
            [*ip, "route", "add", self.pod_cidr, "via", self.node_ip],
            [*ip, "route", "add", self.service_route, "via", self.node_ip],
            # The node forwards between the pods' bridge and the veth; bridged pod traffic
            # goes through iptables so that a pod reaches a service backed by a pod.
            [*self.enter(), "sysctl", "-qw", "net.ipv4.ip_forward=1"],
            [*self.enter(), "sysctl", "-qw", "net.bridge.bridge-nf-call-iptables=1"],
        ]
        try:
            for step in steps:
                subprocess.run(step, check=True, capture_output=True, text=True)
        except subprocess.CalledProcessError as exc:
            self.delete()
            raise RuntimeError(f"{' '.join(exc.cmd)}: {exc.stderr.strip()}") from exc

    def delete(self) -> None:
        """Delete the namespace: the veth pair and the host's routes over it go with it."""
        if self.exists():
            subprocess.run(["ip", "netns", "del", self.name], check=True)
        subprocess.run(["ip", "link", "del", self.host_link], capture_output=True, check=False)
