"""The images, built here and run against a real broker.

``make images`` (scripts/images.py) builds them with podman: cached, so a run with nothing
changed takes seconds, a first run minutes. Then each image runs its real command on the
host's network against an embedded Apache Kafka on loopback: the ingest image serves
(health SERVING, a publish acknowledged, the record in Kafka, SIGTERM drains and exits 0),
the enricher image runs ``headwater enricher run`` in Spark's local mode until it has
completed the published message (events and completion in Kafka), and the gateway image
runs ``headwater gateway run`` between a real Mosquitto and the ingest image: its
HEALTHCHECK passes, a QoS 1 value reaches Kafka and leaves the spool (on a volume), SIGTERM
stops it with exit 0. The chart's image references are checked against what was built.

Marker ``images``: not part of ``make test`` (the default deselects it); ``make
test-images`` and ``.ci/run`` run it (docs/deploy.md).
"""

from __future__ import annotations

import asyncio
import contextlib
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

import aiomqtt
import grpc
import pytest
import yaml
from google.protobuf import json_format

from headwater.gateway.app.health import probe
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
from tests.support.mosquitto import mosquitto  # noqa: F401 (a fixture)

ROOT = Path(__file__).resolve().parents[2]
#: A cold build (bases with mmdebstrap, pyspark from PyPI) is minutes; a cached one seconds.
BUILD_WITHIN_S = 1800
ENRICHED_WITHIN_S = 300
#: A container's start, an MQTT value's way to Kafka, a health check: seconds each, bounded.
GATEWAY_WITHIN_S = 90

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
    """Build the images (make images' command); return its figures."""
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
class ServingIngest:
    """An ingest container, SERVING on ``target``; ``stopped`` once SIGTERM ended it."""

    name: str
    target: str
    token: str
    proc: subprocess.Popen[str]
    stopped: tuple[int, str, str] | None = None


@contextlib.contextmanager
def _serving_ingest(image: str, broker: str, folder: Path) -> Iterator[ServingIngest]:
    """Serve with the ingest image until the block ends, then SIGTERM it."""
    token = uuid.uuid4().hex
    tokens = folder / "tokens.yaml"
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
        image,
        {
            "HEADWATER_KAFKA_BOOTSTRAP_SERVERS": broker,
            "HEADWATER_INGEST_LISTEN_ADDRESS": f"127.0.0.1:{grpc_port}",
            "HEADWATER_INGEST_METRICS_PORT": str(free_port()),
            "HEADWATER_INGEST_TOKENS_FILE": "/etc/headwater/gateways/tokens.yaml",
        },
        volumes=(f"{tokens}:/etc/headwater/gateways/tokens.yaml:ro",),
        extra=("--read-only", "--tmpfs", "/tmp"),
    )
    serving = ServingIngest(name, f"127.0.0.1:{grpc_port}", token, proc)
    try:
        asyncio.run(_until_serving(serving))
        yield serving
    finally:
        serving.stopped = _stop(name, proc, 60)


async def _until_serving(ingest: ServingIngest) -> None:
    deadline = time.monotonic() + 60
    while await health_status(ingest.target) != "SERVING":
        if ingest.proc.poll() is not None:
            pytest.fail(f"the ingest container exited: {ingest.proc.communicate()[1][-3000:]}")
        assert time.monotonic() < deadline, "the ingest container was not SERVING in time"
        await asyncio.sleep(0.5)


@dataclass
class IngestRun:
    """What the ingest container did: its answer to one publish, then its exit."""

    message_id: str
    codes: list[int]
    exit_code: int
    stderr: str


async def _publish(ingest: ServingIngest, message_id: str) -> list[int]:
    request = json_format.ParseDict(
        publish_body(DEMO_DEVICE, message_id), api.PublishTelemetryRequest()
    )
    async with grpc.aio.insecure_channel(ingest.target) as channel:
        reply = await ingest_service_pb2_grpc.IngestServiceStub(channel).PublishTelemetry(
            request, metadata=[("authorization", f"Bearer {ingest.token}")], timeout=30
        )
    return [r.code for r in reply.results]


@pytest.fixture(scope="module")
def ingest_run(
    built: dict[str, Any], broker: str, tmp_path_factory: pytest.TempPathFactory
) -> IngestRun:
    """Serve with the ingest image, publish one message, SIGTERM it."""
    folder = tmp_path_factory.mktemp("ingest-image")
    message_id = f"image-{uuid.uuid4().hex[:8]}"
    with _serving_ingest(built["ingest"]["image"], broker, folder) as ingest:
        codes = asyncio.run(_publish(ingest, message_id))
    assert ingest.stopped is not None
    code, _out, err = ingest.stopped
    return IngestRun(message_id, codes, code, err)


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


def test_gateway_image_delivers_an_mqtt_value_through_ingest(
    built: dict[str, Any],
    broker: str,
    mosquitto,  # noqa: F811 (the fixture)
    tmp_path: Path,
):
    """The gateway image between a real Mosquitto and the ingest image, as users run it."""
    image = built["gateway"]["image"]
    inspect = images.podman(
        "image", "inspect", "--format", "{{.Config.User}} {{.Config.StopSignal}}", image,
        capture=True,
    ).split()  # fmt: skip
    assert inspect == ["10001:10001", "SIGTERM"]
    plant = f"image{uuid.uuid4().hex[:8]}"
    marker = uuid.uuid4().hex
    health_listen = f"127.0.0.1:{free_port()}"
    volume = f"headwater-gateway-spool-{uuid.uuid4().hex[:8]}"
    name = f"headwater-gateway-test-{uuid.uuid4().hex[:8]}"
    with _serving_ingest(built["ingest"]["image"], broker, tmp_path) as ingest:
        config = tmp_path / "gateway.yaml"
        config.write_text(yaml.safe_dump({
            "ingest": {"target": ingest.target, "token_env": "HEADWATER_GATEWAY_TOKEN"},
            "spool": {"path": "/var/lib/headwater-gateway/spool.db"},
            "health": {"listen": health_listen, "log_every_s": 0},
            "connectors": [{
                "name": "edge-mqtt", "type": "mqtt", "qos": 1,
                "broker": {"host": "127.0.0.1", "port": mosquitto.port, "client_id": name},
                "topics": [{"filter": f"{plant}/+/telemetry", "device_id": f"{plant}-{{1}}",
                            "content_type": "application/vnd.acme.telemetry.v1+json"}],
            }],
        }))  # fmt: skip
        config.chmod(0o644)  # the image runs as uid 10001
        # The config read-only, the spool on a named volume (it takes the image folder's
        # owner), a read-only root: the spool is the one place the gateway writes.
        proc = _podman_run(
            name,
            image,
            {"HEADWATER_GATEWAY_TOKEN": ingest.token},
            volumes=(
                f"{config}:/etc/headwater/gateway.yaml:ro",
                f"{volume}:/var/lib/headwater-gateway",
            ),
            extra=("--read-only", "--tmpfs", "/tmp"),
        )
        try:
            _until(lambda: _healthcheck(name) == 0, proc, "the image's HEALTHCHECK passed")
            asyncio.run(_publish_mqtt(mosquitto.port, f"{plant}/m1/telemetry", marker))
            _until(lambda: _in_ingest_topic(broker, marker), proc, "the value in Kafka")
            # Acknowledged by ingest: deleted from the spool.
            _until(lambda: _spool_depth(health_listen) == 0, proc, "the spool delivered")
        finally:
            code, _out, err = _stop(name, proc, 60)
            mountpoint = _volume_mountpoint(volume)
            spool_kept = bool(mountpoint) and (Path(mountpoint) / "spool.db").exists()
            subprocess.run([*images.PODMAN, "volume", "rm", "--force", volume], check=False)
    assert code == 0, err[-3000:]
    stopped = [json.loads(line) for line in err.splitlines() if '"gateway stopped"' in line]
    assert [line["spool_depth"] for line in stopped] == [0], err[-3000:]
    assert spool_kept, "the spool was not on the volume"


def _until(condition: Any, proc: subprocess.Popen[str], what: str) -> None:
    deadline = time.monotonic() + GATEWAY_WITHIN_S
    while not condition():
        if proc.poll() is not None:
            pytest.fail(f"the gateway container exited before {what}: {proc.communicate()[1]}")
        assert time.monotonic() < deadline, f"not within {GATEWAY_WITHIN_S}s: {what}"
        time.sleep(0.5)


def _healthcheck(name: str) -> int:
    """Run the container's HEALTHCHECK now (podman healthcheck run): 0 when healthy."""
    return subprocess.run(
        [*images.PODMAN, "healthcheck", "run", name], capture_output=True, check=False
    ).returncode


async def _publish_mqtt(port: int, topic: str, marker: str) -> None:
    async with aiomqtt.Client("127.0.0.1", port, identifier=uuid.uuid4().hex) as client:
        await client.publish(topic, json.dumps({"marker": marker}).encode(), qos=1)


def _in_ingest_topic(broker: str, marker: str) -> bool:
    topic = INGEST_TOPICS["telemetry"]
    return any(marker.encode() in (m.value() or b"") for m in read_topic(broker, topic, 10))


def _spool_depth(listen: str) -> int | None:
    answer = probe(listen)
    return None if answer is None else answer[1]["spool"]["depth"]


def _volume_mountpoint(volume: str) -> str:
    """The volume's folder on the host ("" when podman never made it)."""
    return subprocess.run(
        [*images.PODMAN, "volume", "inspect", "--format", "{{.Mountpoint}}", volume],
        capture_output=True, text=True, check=False,
    ).stdout.strip()  # fmt: skip
