"""``headwater status`` against a local stand-in for the Kubernetes API (no cluster here)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest

from headwater.ops.status import assess

DEPLOYMENT = {
    "metadata": {"name": "hw-headwater-ingest"},
    "spec": {"replicas": 2},
    "status": {"readyReplicas": 2},
}
POD = {
    "metadata": {"name": "hw-headwater-ingest-abc"},
    "status": {"phase": "Running", "containerStatuses": [{"ready": True, "restartCount": 0}]},
}
SPARK = {
    "metadata": {"name": "hw-headwater-enricher"},
    "status": {"applicationState": {"state": "RUNNING"}, "submissionAttempts": 1},
}


def test_healthy_release():
    assert assess([DEPLOYMENT], [POD], [SPARK], max_lag=10).healthy


@pytest.mark.parametrize(
    ("deployments", "pods", "apps", "lag", "component"),
    [
        ([], [POD], [SPARK], None, "ingest"),
        (
            [{**DEPLOYMENT, "status": {"readyReplicas": 1}}],
            [POD],
            [SPARK],
            None,
            "deployment/hw-headwater-ingest",
        ),
        (
            [DEPLOYMENT],
            [
                {
                    **POD,
                    "status": {
                        "phase": "Running",
                        "containerStatuses": [{"ready": True, "restartCount": 9}],
                    },
                }
            ],
            [SPARK],
            None,
            "pod/hw-headwater-ingest-abc",
        ),
        (
            [DEPLOYMENT],
            [POD],
            [{**SPARK, "status": {"applicationState": {"state": "FAILED", "errorMessage": "gap"}}}],
            None,
            "sparkapplication/hw-headwater-enricher",
        ),
        ([DEPLOYMENT], [POD], [], None, "enricher"),
        ([DEPLOYMENT], [POD], [SPARK], 10**6, "lag"),
    ],
)
def test_each_problem_needs_attention(deployments, pods, apps, lag, component):
    result = assess(deployments, pods, apps, max_lag=lag)
    assert not result.healthy
    assert [c["component"] for c in result.checks if not c["ok"]] == [component]


class FakeKubernetesApi(BaseHTTPRequestHandler):
    """Answers the three list calls ``headwater status`` makes, checking the selectors."""

    spark_state = "RUNNING"

    def do_GET(self):
        url = urlparse(self.path)
        selector = parse_qs(url.query).get("labelSelector", [""])[0]
        assert "app.kubernetes.io/instance=hw" in selector
        if url.path.endswith("/deployments"):
            spec = {
                **DEPLOYMENT["spec"],
                "selector": {"matchLabels": {"app.kubernetes.io/instance": "hw"}},
                "template": {"metadata": {}, "spec": {"containers": [{"name": "ingest"}]}},
            }
            item = {"apiVersion": "apps/v1", "kind": "Deployment", **DEPLOYMENT, "spec": spec}
            body = {"kind": "DeploymentList", "apiVersion": "apps/v1", "items": [item]}
        elif url.path.endswith("/pods"):
            body = {
                "kind": "PodList",
                "apiVersion": "v1",
                "items": [
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        **POD,
                        "spec": {"containers": [{"name": "ingest"}]},
                    }
                ],
            }
        elif url.path.endswith("/sparkapplications"):
            app = {**SPARK, "status": {"applicationState": {"state": self.spark_state}}}
            body = {"items": [app]}
        else:
            self.send_response(404)
            self.end_headers()
            return
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def kubeconfig(tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeKubernetesApi)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    path = tmp_path / "kubeconfig"
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": "c", "cluster": {"server": f"http://127.0.0.1:{server.server_port}"}}
                ],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [
                    {"name": "x", "context": {"cluster": "c", "user": "u", "namespace": "hw"}}
                ],
                "current-context": "x",
            }
        )
    )
    yield path
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(("state", "code"), [("RUNNING", 0), ("FAILED", 1)])
def test_status_command_exit_code_gates_a_rollout(kubeconfig, state, code):
    FakeKubernetesApi.spark_state = state
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "headwater.cli",
            "status",
            "--namespace",
            "hw",
            "--release",
            "hw",
            "--no-lag",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={"KUBECONFIG": str(kubeconfig), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == code, result.stderr
    checks = [json.loads(line) for line in result.stdout.splitlines()]
    assert {c["component"] for c in checks} == {
        "deployment/hw-headwater-ingest",
        "pod/hw-headwater-ingest-abc",
        "sparkapplication/hw-headwater-enricher",
    }


def _status(kubeconfig, *args: str) -> tuple[int, dict[str, dict]]:
    command = [sys.executable, "-m", "headwater.cli", "status", "--namespace", "hw"]
    result = subprocess.run(
        [*command, "--release", "hw", *args, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"KUBECONFIG": str(kubeconfig), "PATH": "/usr/bin:/bin"},
    )
    checks = {c["component"]: c for c in map(json.loads, result.stdout.splitlines())}
    return result.returncode, checks


def test_status_checks_the_enricher_lag_per_partition(kubeconfig, kafka_bootstrap, topic_factory):
    from confluent_kafka import Consumer, Producer, TopicPartition

    FakeKubernetesApi.spark_state = "RUNNING"
    topic = topic_factory("progress", partitions=2)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(10):
        producer.produce(topic, b"x", partition=i % 2)
    assert producer.flush(10) == 0
    group = f"enricher-{topic}"
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group})
    consumer.commit(
        offsets=[TopicPartition(topic, 0, 5), TopicPartition(topic, 1, 1)], asynchronous=False
    )
    consumer.close()
    base = ("--bootstrap-servers", kafka_bootstrap, "--group", group)
    code, checks = _status(kubeconfig, *base)
    assert code == 0, checks
    assert checks[f"lag/{topic}[0]"]["ok"] and "lag 0" in checks[f"lag/{topic}[0]"]["detail"]
    assert "lag 4" in checks[f"lag/{topic}[1]"]["detail"]
    assert checks["lag"]["detail"].startswith("max offset lag 4")
    code, checks = _status(kubeconfig, *base, "--lag-threshold", "3")
    assert code == 1
    assert [c for c, v in checks.items() if not v["ok"]] == [f"lag/{topic}[1]", "lag"]
    # A group that committed nothing is worth a look, and says where else to look.
    code, checks = _status(kubeconfig, "--bootstrap-servers", kafka_bootstrap, "--group", "none")
    assert code == 1 and "--checkpoint" in checks["lag"]["detail"]
