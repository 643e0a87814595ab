#!/usr/bin/env python3
"""A one-node Kubernetes cluster on this machine, from the binaries ``make cluster`` built.

Every component runs as a process of ours inside a network namespace of its own
(network.py): etcd, the API server, controller manager, scheduler, containerd, kubelet,
kube-proxy and CoreDNS. The pids go to .cluster/run/state.json, so ``stop`` (from this or
another process) tears down by pid: workloads first (controllers, then pods, so nothing is
recreated behind the teardown), then the components, the containerd shims of our socket,
mounts under our folders, the pods' network namespaces and CNI cache entries, and last the
namespace itself. ``leftovers()`` lists whatever of that would remain.

Usage: cluster.py up | down | status | leftovers
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from scripts.cluster import configs
from scripts.cluster.network import NETNS_DIR, Network
from scripts.cluster.pins import BIN, HOME
from scripts.cluster.pki import Pki

NODE = "headwater-node"
CNI_RESULTS = Path("/var/lib/cni/results")
#: kubelet's pod cgroups (cgroupfs driver) are /kubepods in every hierarchy.
CGROUPS = Path("/sys/fs/cgroup")
#: The order components start in; they stop in the reverse order.
COMPONENTS = (
    "containerd",
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubelet",
    "kube-proxy",
    "coredns",
)


def log(event: str, **fields: object) -> None:
    """One JSON log line on stderr."""
    print(json.dumps({"event": event, **fields}), file=sys.stderr, flush=True)


def wait_for(what: str, check: Callable[[], bool], timeout_s: float, step_s: float = 0.5) -> None:
    """Poll ``check`` until true; TimeoutError naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout_s:.0f} s")
        time.sleep(step_s)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _started(pid: int) -> int | None:
    """When ``pid`` started (clock ticks since boot), or None once it is gone or a zombie.

    A pid and its start time name one process: a pid reused later starts at another time.
    (Its command line is no proof: it is briefly empty while the process execs.)
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()  # after "pid (comm)": state is field 3
    return None if fields[0] in ("Z", "X") else int(fields[19])


def _stop_pid(pid: int, started: int | None, grace_s: float = 15.0) -> None:
    """SIGTERM, then SIGKILL after ``grace_s``, to the process ``pid`` started at ``started``."""

    def running() -> bool:
        return started is not None and _started(pid) == started

    if not running():
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while running() and time.monotonic() < deadline:
        time.sleep(0.2)
    if running():
        os.kill(pid, signal.SIGKILL)
        wait_for(f"pid {pid} to exit", lambda: not running(), 10)


class Cluster:
    """The cluster's processes, folders and network, and what the tests call on it."""

    def __init__(self, home: Path = HOME, network: Network | None = None) -> None:
        self.network = network or Network()
        self.run = home / "run"
        self.bin = BIN
        self.containerd_root = home / "containerd"  # kept between runs: imported images
        self.pki = Pki(self.run / "pki")
        self.socket = self.run / "containerd.sock"
        self.state_file = self.run / "state.json"

    # -- what the tests use ---------------------------------------------------------------

    @property
    def kubeconfig(self) -> Path:
        """The admin's kubeconfig (for kubectl and helm)."""
        return self.pki.kubeconfig("admin")

    @property
    def server(self) -> str:
        """The API server's URL."""
        return self.network.api_server

    def kubectl(
        self, *args: str, timeout_s: float = 120, check: bool = True, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run the built kubectl as the admin."""
        return subprocess.run(
            [str(self.bin / "kubectl"), f"--kubeconfig={self.kubeconfig}", *args],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=check,
            input=input,
        )

    def ctr(self, *args: str, timeout_s: float = 600) -> subprocess.CompletedProcess[str]:
        """Run containerd's ctr on the cluster's containerd, in kubelet's namespace."""
        return subprocess.run(
            ["ctr", f"--address={self.socket}", "-n", "k8s.io", *args],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=True,
        )

    def import_image(self, archive: Path) -> None:
        """Import a docker or OCI archive into the cluster's containerd (no registry)."""
        self.ctr("images", "import", str(archive))

    def import_podman_image(self, ref: str) -> bool:
        """Import ``ref`` from podman's storage unless this image is imported already.

        ``podman save`` streams into ``ctr images import``; the image id imported last is
        kept beside containerd's own folder (which outlives the cluster), so a rebuilt image
        is imported again and an unchanged one is not. True when it imported.
        """
        image_id = subprocess.run(
            ["podman", "image", "inspect", "--format", "{{.Id}}", ref],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        marker = self.containerd_root / "imported" / ref.replace("/", "_").replace(":", "_")
        listed = self.ctr("images", "ls", "-q", timeout_s=30).stdout.split()
        if marker.exists() and marker.read_text() == image_id and _docker_name(ref) in listed:
            return False
        with subprocess.Popen(
            ["podman", "save", "--format", "docker-archive", ref], stdout=subprocess.PIPE
        ) as save:
            subprocess.run(
                ["ctr", f"--address={self.socket}", "-n", "k8s.io", "images", "import", "-"],
                stdin=save.stdout, capture_output=True, check=True, timeout=1200,
            )  # fmt: skip
        if save.returncode != 0:
            raise RuntimeError(f"podman save {ref}: exit {save.returncode}")
        marker.parent.mkdir(exist_ok=True)
        marker.write_text(image_id)
        return True

    def api_get(self, path: str, timeout_s: float = 5) -> bytes:
        """GET ``path`` from the API server as the admin."""
        token = self._admin_token()
        context = ssl.create_default_context(cafile=str(self.pki.ca))
        request = urllib.request.Request(
            self.server + path, headers={"Authorization": f"Bearer {token}"}
        )
        with urllib.request.urlopen(request, timeout=timeout_s, context=context) as response:
            body: bytes = response.read()
            return body

    # -- start --------------------------------------------------------------------------------

    def start(self, timeout_s: float = 240) -> None:
        """Start every component; return once the node is Ready (a stale cluster is stopped)."""
        missing = [n for n in (*COMPONENTS[1:], "kubectl") if not (self.bin / n).exists()]
        if missing:
            raise RuntimeError(f"not built: {', '.join(missing)} (run `make cluster`)")
        if self.network.exists() or self.state_file.exists():
            log("stale_cluster", run=str(self.run))
            self.stop()
        started = time.monotonic()
        shutil.rmtree(self.run, ignore_errors=True)
        (self.run / "logs").mkdir(parents=True)
        self.containerd_root.mkdir(parents=True, exist_ok=True)
        self._save({"pids": {}, "netns_before": self._pod_netns(), "started": time.time()})
        try:
            self._write_configs()
            self.network.create()
            self._start_components(started + timeout_s)
        except BaseException:
            self.stop()
            raise
        log("cluster_ready", seconds=round(time.monotonic() - started, 1))

    def _write_configs(self) -> None:
        net = self.network
        self.pki.create(NODE, net.node_ip, _first_ip(net.service_cidr), net.api_server)
        (self.run / "cni").mkdir()
        (self.run / "cni" / "10-headwater.conflist").write_text(
            configs.cni(net, self.run / "cni-ipam")
        )
        (self.run / "containerd.toml").write_text(
            configs.containerd(
                self.containerd_root, self.run / "containerd", self.socket, self.run / "cni"
            )
        )
        (self.run / "kubelet.yaml").write_text(configs.kubelet(net, self.socket))
        (self.run / "kube-proxy.yaml").write_text(
            configs.kube_proxy(net, self.pki.kubeconfig("kube-proxy"), NODE)
        )
        (self.run / "Corefile").write_text(configs.corefile(net, self.kubeconfig))

    def _arguments(self) -> dict[str, list[str]]:
        net, pki, run = self.network, self.pki, self.run
        return {
            "containerd": ["containerd", f"--config={run / 'containerd.toml'}"],
            "etcd": [
                str(self.bin / "etcd"),
                "--name=node",
                f"--data-dir={run / 'etcd'}",
                "--listen-client-urls=http://127.0.0.1:2379",
                "--advertise-client-urls=http://127.0.0.1:2379",
                "--listen-peer-urls=http://127.0.0.1:2380",
                "--initial-advertise-peer-urls=http://127.0.0.1:2380",
                "--initial-cluster=node=http://127.0.0.1:2380",
                # A throwaway cluster on a busy shared disk: no fsync per write.
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
            "kube-apiserver": [
                str(self.bin / "kube-apiserver"),
                "--etcd-servers=http://127.0.0.1:2379",
                f"--advertise-address={net.node_ip}",
                "--secure-port=6443",
                f"--tls-cert-file={pki.file('apiserver.crt')}",
                f"--tls-private-key-file={pki.file('apiserver.key')}",
                f"--client-ca-file={pki.ca}",
                f"--token-auth-file={pki.tokens}",
                "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=NodeRestriction",
                f"--service-cluster-ip-range={net.service_cidr}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={pki.file('sa.pub')}",
                f"--service-account-signing-key-file={pki.file('sa.key')}",
                "--kubelet-preferred-address-types=InternalIP",
                "--allow-privileged=true",
            ],
            "kube-controller-manager": [
                str(self.bin / "kube-controller-manager"),
                f"--kubeconfig={pki.kubeconfig('controller-manager')}",
                f"--service-account-private-key-file={pki.file('sa.key')}",
                f"--root-ca-file={pki.ca}",
                f"--service-cluster-ip-range={net.service_cidr}",
                "--leader-elect=false",
                # Each controller with its own service account and the bootstrap roles for it.
                "--use-service-account-credentials=true",
            ],
            "kube-scheduler": [
                str(self.bin / "kube-scheduler"),
                f"--kubeconfig={pki.kubeconfig('scheduler')}",
                "--leader-elect=false",
            ],
            "kubelet": [
                str(self.bin / "kubelet"),
                f"--config={run / 'kubelet.yaml'}",
                f"--kubeconfig={pki.kubeconfig('kubelet')}",
                f"--root-dir={run / 'kubelet'}",
                f"--hostname-override={NODE}",
                f"--node-ip={net.node_ip}",
            ],
            "kube-proxy": [
                str(self.bin / "kube-proxy"),
                f"--config={run / 'kube-proxy.yaml'}",
            ],
            "coredns": [str(self.bin / "coredns"), f"-conf={run / 'Corefile'}"],
        }

    def _spawn(self, name: str, argv: list[str]) -> None:
        logfile = (self.run / "logs" / f"{name}.log").open("ab")
        process = subprocess.Popen(
            [*self.network.enter(), *argv],
            stdout=logfile,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=self.run,
        )
        logfile.close()
        state = self._load()
        state["pids"][name] = [process.pid, _started(process.pid)]
        self._save(state)

    def _alive(self, name: str) -> bool:
        if not self.state_file.exists():
            return False
        pid, started = self._load()["pids"].get(name, (None, None))
        return pid is not None and started is not None and _started(pid) == started

    def _check_running(self, name: str) -> None:
        if not self._alive(name):
            tail = (self.run / "logs" / f"{name}.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{name} exited:\n{tail}")

    def _start_components(self, deadline: float) -> None:
        arguments = self._arguments()

        def until(what: str, check: Callable[[], bool], *watched: str) -> None:
            def probe() -> bool:
                for name in watched:
                    self._check_running(name)
                return check()

            wait_for(what, probe, max(1.0, deadline - time.monotonic()))

        self._spawn("containerd", arguments["containerd"])
        until("containerd", self.socket.exists, "containerd")
        self._spawn("etcd", arguments["etcd"])
        self._spawn("kube-apiserver", arguments["kube-apiserver"])
        until("API server ready", self._api_ready, "etcd", "kube-apiserver")
        for name in COMPONENTS[3:]:
            self._spawn(name, arguments[name])
        until("node Ready", self._node_ready, *COMPONENTS)
        until(
            "the default service account",
            lambda: self.kubectl("get", "serviceaccount", "default", check=False).returncode == 0,
            *COMPONENTS,
        )

    def _api_ready(self) -> bool:
        try:
            return self.api_get("/readyz") == b"ok"
        except (OSError, urllib.error.URLError):
            return False

    def _node_ready(self) -> bool:
        try:
            node = json.loads(self.api_get(f"/api/v1/nodes/{NODE}"))
        except (OSError, urllib.error.URLError, ValueError):
            return False
        conditions = node.get("status", {}).get("conditions", [])
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    # -- stop ---------------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop everything by the pids of the state file; remove what the cluster made."""
        state = self._load() if self.state_file.exists() else {"pids": {}, "netns_before": []}
        if self._alive("kube-apiserver") and self._alive("kubelet"):
            self._remove_workloads()
        for name in reversed(COMPONENTS):
            process = state["pids"].get(name)
            if name == "containerd" and self._alive("containerd"):
                self._kill_tasks()
            if process is not None:
                _stop_pid(*process)
        for pid in self._shims():
            _stop_pid(pid, _started(pid), grace_s=5)
        for mount in reversed(self._mounts()):
            subprocess.run(["umount", "-l", mount], check=False, capture_output=True)
        before = set(state.get("netns_before", []))
        for name in self._pod_netns():
            if name not in before:
                subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True)
        for entry in self._cni_results():
            entry.unlink(missing_ok=True)
        for root in self._kubepods():
            # Deepest first: a cgroup is removed once it has no children and no processes.
            for folder in sorted((p for p in root.rglob("*") if p.is_dir()), reverse=True):
                folder.rmdir()
            root.rmdir()
        self.network.delete()
        shutil.rmtree(self.run, ignore_errors=True)
        log("cluster_stopped")

    def _remove_workloads(self) -> None:
        """Delete the workloads while kubelet still runs.

        Controllers first, so that nothing recreates the pods being deleted; then the pods,
        gracefully, so that kubelet tears their sandboxes down (network namespaces, CNI
        leases); then wait for containerd to have no task left.
        """
        kinds = "deployments,statefulsets,daemonsets,replicasets,jobs,cronjobs"
        self.kubectl("delete", kinds, "--all", "--all-namespaces", "--wait=true", check=False)
        self.kubectl(
            "delete", "pods", "--all", "--all-namespaces", "--grace-period=10",
            "--wait=true", "--timeout=120s", timeout_s=150, check=False,
        )  # fmt: skip
        try:
            wait_for("pod sandboxes removed", lambda: not self._tasks(), 90, step_s=1)
        except TimeoutError as exc:
            log("teardown_tasks_left", error=str(exc))

    def _tasks(self) -> list[str]:
        try:
            out = self.ctr("tasks", "ls", "-q", timeout_s=20).stdout
        except (subprocess.SubprocessError, OSError):
            return []
        return out.split()

    def _kill_tasks(self) -> None:
        """Whatever kubelet did not stop (it was stopped, or failed): kill it in containerd."""
        for task in self._tasks():
            for args in (("tasks", "kill", "-s", "SIGKILL", task), ("tasks", "delete", task)):
                with contextlib.suppress(subprocess.SubprocessError, OSError):
                    self.ctr(*args, timeout_s=20)

    # -- what would remain --------------------------------------------------------------------

    def leftovers(self) -> list[str]:
        """What of the cluster remains: nothing once stopped."""
        found = []
        if self.network.exists():
            found.append(f"network namespace {self.network.name}")
        if Path(f"/sys/class/net/{self.network.host_link}").exists():
            found.append(f"link {self.network.host_link}")
        found += [f"shim pid {pid}" for pid in self._shims()]
        found += [f"process {pid}: {_cmdline(pid)[:80]}" for pid in self._processes()]
        found += [f"mount {mount}" for mount in self._mounts()]
        found += [f"CNI cache {entry}" for entry in self._cni_results()]
        found += [f"cgroup {root}" for root in self._kubepods()]
        if self.run.exists():
            found.append(f"folder {self.run}")
        return found

    def _processes(self) -> list[int]:
        """Processes of ours: one of our binaries, our containerd, or anything in a pod."""
        config = str(self.run / "containerd.toml")
        found = []
        for pid in _pids():
            try:
                exe = os.readlink(f"/proc/{pid}/exe")
                cgroups = Path(f"/proc/{pid}/cgroup").read_text()
            except OSError:
                continue
            if exe.startswith(f"{self.bin}/") or config in _cmdline(pid) or "/kubepods" in cgroups:
                found.append(pid)
        return found

    def processes(self) -> list[int]:
        """The cluster's processes now: its components, and containerd's shims.

        Every pod's processes descend from a shim, and a shim is re-parented away from
        containerd, so both are listed.
        """
        alive = []
        if self.state_file.exists():
            for pid, started in self._load()["pids"].values():
                if started is not None and _started(pid) == started:
                    alive.append(pid)
        return alive + self._shims()

    def _shims(self) -> list[int]:
        return [pid for pid in _pids() if f"-address {self.socket}" in _cmdline(pid)]

    def _mounts(self) -> list[str]:
        roots = (str(self.run) + "/", str(self.containerd_root) + "/")
        mounts = []
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            point = line.split()[4].replace("\\040", " ")
            if point.startswith(roots):
                mounts.append(point)
        return mounts

    def _pod_netns(self) -> list[str]:
        # containerd 1.6 puts pod network namespaces here, whatever its state folder.
        return sorted(p.name for p in NETNS_DIR.glob("cni-*")) if NETNS_DIR.exists() else []

    def _kubepods(self) -> list[Path]:
        return sorted(CGROUPS.glob("*/kubepods"))

    def _cni_results(self) -> list[Path]:
        return sorted(CNI_RESULTS.glob(f"{configs.CNI_NETWORK}-*"))

    # -- state ------------------------------------------------------------------------------

    def _load(self) -> dict:  # type: ignore[type-arg]
        return json.loads(self.state_file.read_text())  # type: ignore[no-any-return]

    def _save(self, state: dict) -> None:  # type: ignore[type-arg]
        self.state_file.write_text(json.dumps(state, indent=2))

    def _admin_token(self) -> str:
        for row in self.pki.tokens.read_text().splitlines():
            token, user = row.split(",")[:2]
            if user == "headwater-admin":
                return token
        raise RuntimeError("no admin token")


def _docker_name(ref: str) -> str:
    """``ref`` as containerd names it (``docker.io/`` for a name without a registry)."""
    first = ref.split("/", 1)[0]
    has_registry = "/" in ref and ("." in first or ":" in first or first == "localhost")
    return ref if has_registry else f"docker.io/{ref if '/' in ref else 'library/' + ref}"


def _pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def _first_ip(cidr: str) -> str:
    network = cidr.split("/")[0].split(".")
    return ".".join([*network[:3], str(int(network[3]) + 1)])


def main() -> None:
    """The command line: up, down, status, leftovers."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("up", "down", "status", "leftovers"))
    args = parser.parse_args()
    cluster = Cluster()
    if os.geteuid() != 0:
        print("cluster: needs root (network namespaces, mounts, containerd)", file=sys.stderr)
        sys.exit(2)
    if args.command == "up":
        cluster.start()
        print(f"export KUBECONFIG={cluster.kubeconfig}")
    elif args.command == "down":
        cluster.stop()
    elif args.command == "status":
        print(cluster.kubectl("get", "nodes,pods", "-A", "-o", "wide").stdout)
    else:
        found = cluster.leftovers()
        print("\n".join(found) or "nothing")
        sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
