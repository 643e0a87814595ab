"""What the live chart tests stand on: the images in the cluster, a broker outside it, a
gateway on the host, and reading completions back. (Fixtures are in test_chart_live.py.)"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from headwater.gateway import GatewayClient, GatewayConfig, NewMessage, Spool
from headwater.gateway.answers import DeliveryReport
from headwater.proto.events.v1 import completion_pb2
from headwater.topics import COMPLETIONS_TOPIC
from headwater_dev.devstack.broker import EmbeddedBroker
from headwater_dev.devstack.connect import DEMO_PAYLOAD
from headwater_dev.devstack.ports import free_port
from headwater_dev.devstack.readback import read_topic
from headwater_dev.devstack.supervisor import DEMO_DEVICE
from headwater_dev.devstack.vendors import ACME_TELEMETRY
from scripts.cluster.cluster import Cluster
from scripts.cluster.network import Network

ROOT = Path(__file__).resolve().parents[2]


def build_images() -> dict[str, Any]:
    """``make images`` (cached by podman); its figures, with the references built."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "images.py"), "--json"],
        capture_output=True, text=True, timeout=2400, check=False, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"make images failed:\n{done.stderr[-5000:]}")
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


@contextmanager
def broker_for_cluster(log: Path, network: Network) -> Iterator[tuple[str, str]]:
    """An embedded broker on the host: (bootstrap for the host, bootstrap for the pods).

    The broker listens on loopback only; a second listener is advertised at the host side
    of the veth, where socat forwards it to loopback. Pods reach it over the veth; nothing
    else can (the namespace has no other way out).
    """
    port, cluster_port = free_port(), free_port()
    cluster_side = f"{network.host_ip}:{cluster_port}"
    with EmbeddedBroker(
        port=port,
        log_path=log,
        extra_listeners={"CLUSTER": ("PLAINTEXT", cluster_port)},
        config={"advertised.listeners": f"PLAINTEXT://127.0.0.1:{port},CLUSTER://{cluster_side}"},
    ) as broker:
        forward = subprocess.Popen(
            ["socat", f"TCP-LISTEN:{cluster_port},bind={network.host_ip},reuseaddr,fork",
             f"TCP:127.0.0.1:{cluster_port}"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            yield broker.bootstrap_servers, cluster_side
        finally:
            forward.terminate()
            forward.wait(timeout=10)


def publish(
    target: str,
    token: str,
    spool: Path,
    count: int,
    batch: int = 0,
    pause_s: float = 0.0,
    within_s: float = 180,
    devices: tuple[str, ...] = (DEMO_DEVICE,),
    timed: list[tuple[float, DeliveryReport]] | None = None,
) -> list[str]:
    """Send ``count`` demo readings through the gateway library; the acknowledged ids.

    ``batch`` readings are spooled every ``pause_s`` seconds (all at once by default), so
    that a test can disturb the cluster while they flow; they come from ``devices`` in turn.
    ``timed`` gets every delivery report with the monotonic time it came.
    """

    async def run() -> list[str]:
        reports: list[DeliveryReport] = []

        def report(delivery: DeliveryReport) -> None:
            reports.append(delivery)
            if timed is not None:
                timed.append((time.monotonic(), delivery))

        config = GatewayConfig(target=target, token=token, call_timeout_s=10.0, backoff_max_s=2.0)
        with Spool(spool) as outbox:
            async with GatewayClient(outbox, config, report) as client:
                stop = asyncio.Event()
                sender = asyncio.create_task(client.run(stop))
                step = batch or count
                for start in range(0, count, step):
                    size = min(step, count - start)
                    turn = [devices[(start + i) % len(devices)] for i in range(size)]
                    readings = [NewMessage(d, ACME_TELEMETRY, DEMO_PAYLOAD) for d in turn]
                    await client.enqueue_many("telemetry", readings)
                    await asyncio.sleep(pause_s)
                drained = await client.drain(within_s=within_s)
                stop.set()
                await sender
        if not drained:
            raise TimeoutError(f"the gateway did not drain {count} messages in {within_s} s")
        return [r.message_id for r in reports if r.status == "delivered"]

    return asyncio.run(run())


class Publisher(threading.Thread):
    """:func:`publish` in the background; ``acknowledged`` once joined."""

    def __init__(
        self,
        target: str,
        token: str,
        spool: Path,
        count: int,
        pause_s: float,
        batch: int = 5,
        devices: tuple[str, ...] = (DEMO_DEVICE,),
    ):
        super().__init__(daemon=True)
        self.args = (target, token, spool, count, batch, pause_s)
        self.devices = devices
        self.acknowledged: list[str] = []
        #: Every delivery report so far, with the monotonic time it came.
        self.timed: list[tuple[float, DeliveryReport]] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.acknowledged = publish(*self.args, devices=self.devices, timed=self.timed)
        except BaseException as exc:  # reported by result()
            self.error = exc

    def result(self, within_s: float) -> list[str]:
        """Wait for the end; the acknowledged ids (or the publisher's error)."""
        self.join(within_s)
        if self.is_alive():
            raise TimeoutError(f"the publisher did not finish within {within_s} s")
        if self.error is not None:
            raise self.error
        return self.acknowledged


def terminal_completions(bootstrap: str) -> dict[str, str]:
    """message id -> outcome of every terminal completion so far."""
    done = {}
    for msg in read_topic(bootstrap, COMPLETIONS_TOPIC, timeout_s=10):
        completion = completion_pb2.Completion.FromString(msg.value() or b"")
        if completion.outcome != completion_pb2.OUTCOME_RETRY_SCHEDULED:
            done[completion.message_id] = completion_pb2.Outcome.Name(completion.outcome)
    return done


def wait_completed(bootstrap: str, ids: set[str], within_s: float) -> dict[str, str]:
    """Wait until every id in ``ids`` has a terminal completion; their outcomes."""
    deadline = time.monotonic() + within_s
    while True:
        done = terminal_completions(bootstrap)
        if ids <= done.keys():
            return {i: done[i] for i in ids}
        if time.monotonic() > deadline:
            missing = sorted(ids - done.keys())
            raise TimeoutError(f"{len(missing)} of {len(ids)} without completion: {missing[:5]}")
        time.sleep(3)


def pods(cluster: Cluster, namespace: str, selector: str) -> list[dict[str, Any]]:
    """The pods matching ``selector`` (all of the namespace's when empty)."""
    chosen = ["-l", selector] if selector else []
    out = cluster.kubectl("get", "pods", "-n", namespace, *chosen, "-o", "json").stdout
    items: list[dict[str, Any]] = json.loads(out)["items"]
    return items


def running(pod: dict[str, Any]) -> bool:
    """True when every container of ``pod`` runs."""
    statuses = pod.get("status", {}).get("containerStatuses", [])
    return bool(statuses) and all("running" in s.get("state", {}) for s in statuses)
