"""Consumers get stable names, and a descriptor set that decodes every topic on its own."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import Message

from headwater import contracts
from headwater.proto.events.v1 import completion_pb2
from headwater.topics import all_topics

ROOT = Path(__file__).parents[2]


def test_stable_names_are_the_generated_classes():
    assert contracts.Completion is completion_pb2.Completion
    for name in contracts.__all__:
        value = getattr(contracts, name)
        if name[0].isupper() and name != "TOPIC_MESSAGES":
            # A message class, or an enum wrapper (Outcome, Severity).
            assert (isinstance(value, type) and issubclass(value, Message)) or hasattr(
                value, "DESCRIPTOR"
            ), name
            assert value.DESCRIPTOR.full_name.startswith("headwater."), name


def _pool_from_descriptor_set() -> descriptor_pool.DescriptorPool:
    # A fresh pool, as a consumer without Headwater's generated code would have.
    files = descriptor_pb2.FileDescriptorSet.FromString(contracts.descriptor_set())
    pool = descriptor_pool.DescriptorPool()
    for f in files.file:  # imports come first in a set built with --include_imports
        pool.Add(f)
    return pool


def test_every_topic_has_a_message_in_the_descriptor_set():
    pool = _pool_from_descriptor_set()
    for spec in all_topics():
        assert spec.name in contracts.TOPIC_MESSAGES, spec.name
        assert pool.FindMessageTypeByName(contracts.TOPIC_MESSAGES[spec.name])


def test_descriptor_set_alone_decodes_a_completion():
    pool = _pool_from_descriptor_set()
    completion_type = message_factory.GetMessageClass(
        pool.FindMessageTypeByName("headwater.events.v1.Completion")
    )
    assert completion_type is not completion_pb2.Completion
    wire = completion_pb2.Completion(
        message_id="m1",
        outcome=completion_pb2.OUTCOME_ENRICHED,
        attempt=2,
        events=[completion_pb2.EventRef(event_id="e1", topic="events.telemetry.v1", offset=9)],
    ).SerializeToString()
    decoded = completion_type.FromString(wire)
    assert (decoded.message_id, decoded.attempt, decoded.events[0].offset) == ("m1", 2, 9)


# Runs in a fresh interpreter that never imports Headwater: only the artifact and protobuf.
FOREIGN_CONSUMER = """
import sys
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
files = descriptor_pb2.FileDescriptorSet.FromString(open(sys.argv[1], "rb").read())
pool = descriptor_pool.DescriptorPool()
for f in files.file:
    pool.Add(f)
cls = message_factory.GetMessageClass(pool.FindMessageTypeByName(sys.argv[2]))
msg = cls.FromString(sys.stdin.buffer.read())
assert not [m for m in sys.modules if m.startswith("headwater")]
print(msg.message_id, msg.attempt, msg.events[0].event_id)
"""


def test_make_descriptors_writes_an_artifact_a_foreign_consumer_can_use():
    # -o: never reinstall the venv from here, even when pyproject.toml changed.
    subprocess.run(
        ["make", "-s", "-o", ".venv/.installed-stamp", "descriptors"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=120,
    )
    artifact = ROOT / "dist" / "headwater.binpb"
    assert artifact.read_bytes() == contracts.descriptor_set()
    wire = completion_pb2.Completion(
        message_id="m7", attempt=3, events=[completion_pb2.EventRef(event_id="e7")]
    ).SerializeToString()
    result = subprocess.run(
        [
            sys.executable,
            "-I",
            "-c",
            FOREIGN_CONSUMER,
            str(artifact),
            "headwater.events.v1.Completion",
        ],
        input=wire,
        capture_output=True,
        timeout=60,
        cwd="/",
    )
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.decode().split() == ["m7", "3", "e7"]


def test_the_wheel_carries_the_descriptor_set_and_the_contracts(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(ROOT / "pyproject.toml", src)
    shutil.copy(ROOT / "README.md", src)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in ("src", "services"):
        shutil.copytree(ROOT / folder, src / folder, ignore=ignore)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-q",
            "-w",
            str(tmp_path / "out"),
            str(src),
        ],
        check=True,
        capture_output=True,
        timeout=180,
    )
    (wheel,) = (tmp_path / "out").glob("headwater-*.whl")
    with zipfile.ZipFile(wheel) as z:
        assert z.read("headwater/proto/headwater.binpb") == contracts.descriptor_set()
        names = set(z.namelist())
    assert {"headwater/contracts.py", "headwater/subscriber/__init__.py"} <= names
