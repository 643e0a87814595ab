"""The two images the chart deploys, built here and run against a real broker.

``make images`` (scripts/images.py) builds them with podman: cached, so a run with nothing
changed takes seconds, a first run minutes. Then each image runs its real command on the
host's network against an embedded Apache Kafka on loopback: the ingest image serves
(health SERVING, a publish acknowledged, the record in Kafka, SIGTERM drains and exits 0),
the enricher image runs ``headwater enricher run`` in Spark's local mode until it has
completed the published message (events and completion in Kafka). The chart's image
references are checked against what was built.

Marker ``images``: not part of ``make test`` (the default deselects it); ``make
test-images`` and ``.ci/run`` run it (docs/deploy.md).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format

from headwater.ingest.admission.auth import hash_token
from headwater.proto.events.v1 import completion_pb2
from headwater.proto.ingest.v1 import ingest_messages_pb2 as api
from headwater.proto.ingest.v1 import ingest_service_pb2_grpc
from headwater.topics import COMPLETIONS_TOPIC, EVENT_TOPICS, INGEST_TOPICS
from headwater_dev.devstack.broker import EmbeddedBroker
from headwater_dev.devstack.connect import publish_body
from headwater_dev.devstack.ports import free_port
from headwater_dev.devstack.processes import create_topics, health_status
from headwater_dev.devstack.readback import read_topic
from headwater_dev.devstack.supervisor import DEMO_DEVICE, _publish_demo_master

ROOT = Path(__file__).resolve().parents[2]
#: A cold build (bases with mmdebstrap, pyspark from PyPI) is minutes; a cached one seconds.
BUILD_WITHIN_S = 1800
ENRICHED_WITHIN_S = 300

pytestmark = [pytest.mark.images, pytest.mark.timeout(BUILD_WITHIN_S + 900)]


def _images_module() -> Any:
    spec = importlib.util.spec_from_file_location("images", ROOT / "scripts" / "images.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


images = _images_module()


@pytest.fixture(scope="module")
def built() -> dict[str, Any]:
    """Build both images (make images' command); return its figures."""
    assert shutil.which("podman"), "podman is required: apt-get install podman buildah mmdebstrap"
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "images.py"), "--json"],
        capture_output=True,
        text=True,
        timeout=BUILD_WITHIN_S,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr[-5000:]
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A broker of this module's own: the enricher reads every ingest topic from the start."""
    log = tmp_path_factory.mktemp("images-broker") / "server.log"
    with EmbeddedBroker(log_path=log) as running:
        create_topics(running.bootstrap_servers)
        _publish_demo_master(running.bootstrap_servers)
        yield running.bootstrap_servers


def test_the_chart_deploys_the_images_that_were_built(built: dict[str, Any]):
    from tests.helm.conftest import render

    refs = images.chart_images()
    assert built["ingest"]["image"] == refs["ingest"]
    assert built["enricher"]["image"] == refs["enricher"]
    deployed = set()
    for obj in render({}):
        text = json.dumps(obj)
        deployed |= {ref for ref in refs.values() if ref in text}
    assert deployed == set(refs.values()), "the rendered chart names other images"
    for ref in refs.values():
        assert images.image_exists(ref)


def _podman_run(
    name: str,
    image: str,
    env: dict[str, str],
    volumes: tuple[str, ...] = (),
    command: tuple[str, ...] = (),
    extra: tuple[str, ...] = (),
) -> subprocess.Popen[str]:
    """Run ``image`` (its own command unless ``command``): host network, limits below the host's."""
    cmd = [*images.PODMAN, "run", "--rm", "--name", name, *images.NETWORK]
    cmd += [*images.CONTAINER_LIMITS, *extra]
    for volume in volumes:
        cmd += ["--volume", volume]
    for key, value in env.items():
        cmd += ["--env", f"{key}={value}"]
    if command:
        cmd += ["--entrypoint", command[0]]
    return subprocess.Popen(
        [*cmd, image, *command[1:]],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )


def _stop(name: str, proc: subprocess.Popen[str], within_s: float) -> tuple[int, str, str]:
    """SIGTERM the container's command (what Kubernetes sends); its exit code and output."""
    subprocess.run([*images.PODMAN, "kill", "--signal", "TERM", name], check=False)
    try:
        out, err = proc.communicate(timeout=within_s)
    except subprocess.TimeoutExpired:
        subprocess.run([*images.PODMAN, "rm", "--force", name], check=False)
        out, err = proc.communicate(timeout=30)
        pytest.fail(f"{name} did not stop within {within_s}s of SIGTERM:\n{err[-3000:]}")
    return proc.returncode, out, err


@dataclass
class IngestRun:
    """What the ingest container did: its answer to one publish, then its exit."""

    message_id: str
    codes: list[int]
    exit_code: int
    stderr: str


async def _serve_and_publish(target: str, proc: subprocess.Popen[str], token: str) -> list[int]:
    deadline = time.monotonic() + 60
    while await health_status(target) != "SERVING":
        if proc.poll() is not None:
            pytest.fail(f"the ingest container exited: {proc.communicate()[1][-3000:]}")
        assert time.monotonic() < deadline, "the ingest container was not SERVING in time"
        await asyncio.sleep(0.5)
    request = json_format.ParseDict(
        publish_body(DEMO_DEVICE, f"image-{token[:8]}"), api.PublishTelemetryRequest()
    )
    async with grpc.aio.insecure_channel(target) as channel:
        reply = await ingest_service_pb2_grpc.IngestServiceStub(channel).PublishTelemetry(
            request, metadata=[("authorization", f"Bearer {token}")], timeout=30
        )
    return [r.code for r in reply.results]


@pytest.fixture(scope="module")
def ingest_run(
    built: dict[str, Any], broker: str, tmp_path_factory: pytest.TempPathFactory
) -> IngestRun:
    """Serve with the ingest image, publish one message, SIGTERM it."""
    token = uuid.uuid4().hex
    tokens = tmp_path_factory.mktemp("ingest-image") / "tokens.yaml"
    tokens.write_text(
        "gateways:\n"
        f"  - id: image-test\n    tenant: dev\n    token_sha256: {hash_token(token)}\n"
        '    devices: ["*"]\n'
    )
    tokens.chmod(0o644)  # the image runs as uid 10001
    grpc_port = free_port()
    name = f"headwater-ingest-test-{uuid.uuid4().hex[:8]}"
    # As the chart runs it: read-only root with a writable /tmp, the tokens file mounted
    # read-only where its Secret goes, the uid of the image.
    proc = _podman_run(
        name,
        built["ingest"]["image"],
        {
            "HEADWATER_KAFKA_BOOTSTRAP_SERVERS": broker,
            "HEADWATER_INGEST_LISTEN_ADDRESS": f"127.0.0.1:{grpc_port}",
            "HEADWATER_INGEST_METRICS_PORT": str(free_port()),
            "HEADWATER_INGEST_TOKENS_FILE": "/etc/headwater/gateways/tokens.yaml",
        },
        volumes=(f"{tokens}:/etc/headwater/gateways/tokens.yaml:ro",),
        extra=("--read-only", "--tmpfs", "/tmp"),
    )
    try:
        codes = asyncio.run(_serve_and_publish(f"127.0.0.1:{grpc_port}", proc, token))
    finally:
        code, _out, err = _stop(name, proc, 60)
    return IngestRun(f"image-{token[:8]}", codes, code, err)


def test_ingest_image_serves_acks_into_kafka_and_drains(ingest_run: IngestRun, broker: str):
    assert ingest_run.codes == [0]  # acknowledged: in Kafka (acks=all)
    assert ingest_run.exit_code == 0, ingest_run.stderr[-3000:]
    assert "draining ingest service" in ingest_run.stderr
    assert "ingest service stopped" in ingest_run.stderr
    found = [
        m
        for topic in INGEST_TOPICS.values()
        for m in read_topic(broker, topic)
        if ingest_run.message_id.encode() in (m.value() or b"")
    ]
    assert len(found) == 1 and found[0].key() == DEMO_DEVICE.encode()


def test_enricher_image_enriches_a_published_message(
    built: dict[str, Any], broker: str, ingest_run: IngestRun
):
    """Spark local mode in the image: the ingest image's message becomes event + completion."""
    message_id = ingest_run.message_id
    name = f"headwater-enricher-test-{uuid.uuid4().hex[:8]}"
    proc = _podman_run(
        name,
        built["enricher"]["image"],
        {
            "HEADWATER_KAFKA_BOOTSTRAP_SERVERS": broker,
            "HEADWATER_ENRICHER_CHECKPOINT_LOCATION": "/tmp/checkpoint",
            "HEADWATER_ENRICHER_STARTING_OFFSETS": "earliest",
            "HEADWATER_ENRICHER_METRICS_PORT": str(free_port()),
        },
        # The image has no entrypoint of its own (the Spark operator supplies the driver's);
        # this is the command its mainApplicationFile runs, in Spark's local mode.
        command=("/opt/headwater/venv/bin/headwater", "enricher", "run"),
    )
    try:
        outcome = _wait_completion(broker, message_id, proc, ENRICHED_WITHIN_S)
    finally:
        code, out, err = _stop(name, proc, 120)
    assert outcome == "OUTCOME_ENRICHED"
    assert code == 0, err[-3000:]
    assert "input_rows" in json.loads(out.strip().splitlines()[-1])  # its exit summary
    events = [m for topic in EVENT_TOPICS.values() for m in read_topic(broker, topic)]
    assert any(m.key() == DEMO_DEVICE.encode() for m in events)


def _wait_completion(
    broker: str, message_id: str, proc: subprocess.Popen[str], within_s: float
) -> str:
    """The outcome of ``message_id``'s terminal completion, read from completions.v1."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the enricher container exited: {proc.communicate()[1][-3000:]}")
        for msg in read_topic(broker, COMPLETIONS_TOPIC, timeout_s=10):
            done = completion_pb2.Completion.FromString(msg.value() or b"")
            if (
                done.message_id == message_id
                and done.outcome != completion_pb2.OUTCOME_RETRY_SCHEDULED
            ):
                return completion_pb2.Outcome.Name(done.outcome)
        time.sleep(2)
    pytest.fail(f"no completion of {message_id} within {within_s}s")
