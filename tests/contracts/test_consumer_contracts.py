"""Consumers get stable names and a descriptor set that decodes every topic on its own."""

from __future__ import annotations

import subprocess
from pathlib import Path

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from headwater import contracts
from headwater.proto.events.v1 import completion_pb2

ROOT = Path(__file__).parents[2]


def test_stable_names_are_the_generated_classes():
    assert contracts.Completion is completion_pb2.Completion
    assert contracts.Outcome.Name(contracts.Outcome.Value("OUTCOME_ENRICHED")) == "OUTCOME_ENRICHED"
    for name in contracts.__all__:
        assert getattr(contracts, name) is not None


def test_descriptor_set_alone_decodes_a_completion():
    # A fresh pool, as a consumer without Headwater's generated code would have.
    files = descriptor_pb2.FileDescriptorSet.FromString(contracts.descriptor_set())
    pool = descriptor_pool.DescriptorPool()
    for f in files.file:  # imports come first in a set built with --include_imports
        pool.Add(f)
    names = {f.name for f in files.file}
    assert "google/protobuf/timestamp.proto" in names
    completion_type = message_factory.GetMessageClass(
        pool.FindMessageTypeByName("headwater.events.v1.Completion")
    )
    wire = completion_pb2.Completion(
        message_id="m1", outcome=completion_pb2.OUTCOME_ENRICHED, attempt=2
    ).SerializeToString()
    decoded = completion_type.FromString(wire)
    assert (decoded.message_id, decoded.attempt) == ("m1", 2)
    for topic_message in (
        "headwater.events.v1.Event",
        "headwater.events.v1.DeadLetter",
        "headwater.events.v1.DeviceState",
        "headwater.device.v1.DeviceMessage",
        "headwater.master.v1.DeviceMaster",
    ):
        assert pool.FindMessageTypeByName(topic_message)


def test_make_descriptors_writes_the_artifact():
    subprocess.run(["make", "-s", "descriptors"], cwd=ROOT, check=True, capture_output=True)
    assert (ROOT / "dist" / "headwater.binpb").read_bytes() == contracts.descriptor_set()
