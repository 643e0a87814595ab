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
