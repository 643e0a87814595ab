"""``headwater master`` against the real broker: load, summary counts, put, delete, show."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from headwater.cli import main
from headwater.kafka.admin import ensure_topics
from headwater.kafka.read import read_topic
from headwater.proto.master.v1.device_master_pb2 import DeviceMaster
from headwater.topics import MASTER_DEVICES_TOPIC, TopicSpec

COMPACTED = {"cleanup.policy": "compact"}


@pytest.fixture
def prefix(kafka_bootstrap: str) -> str:
    """A fresh prefix whose master topic exists (3 partitions, compacted)."""
    value = f"m{uuid.uuid4().hex[:10]}."
    ensure_topics(kafka_bootstrap, [TopicSpec(value + MASTER_DEVICES_TOPIC, 3, 1, COMPACTED)])
    return value


def run(capsys, bootstrap: str, prefix: str, *argv: str) -> tuple[int, str, str]:
    code = main(
        ["master", *argv[:1], "--bootstrap-servers", bootstrap, "--topic-prefix", prefix, *argv[1:]]
    )
    out, err = capsys.readouterr()
    return code, out, err


def records_in_topic(bootstrap: str, topic: str) -> list[tuple[str, bytes | None]]:
    """Every record of the topic as (key, value), in offset order per partition."""
    ordered = sorted(read_topic(bootstrap, topic), key=lambda m: (m.partition(), m.offset()))
    return [(m.key().decode(), m.value()) for m in ordered]


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


FILES = {
    "devices.csv": "tenant,device_id,site,vendor_format\nacme,c-1,plant-a,acme.v1+json\n"
    "acme,c-2,plant-a,acme.v1+json\n",
    "devices.json": '[{"tenant": "acme", "device_id": "j-1", "vendor_format": "acme.v1+json",'
    ' "site": "plant-j"}]',
    "devices.yaml": "devices:\n  - {tenant: globex, device_id: y-1, vendor_format: g.v1,"
    " site: plant-y}\n",
}


@pytest.mark.parametrize("name", sorted(FILES))
def test_load_of_each_format_writes_its_records(capsys, tmp_path, kafka_bootstrap, prefix, name):
    path = write(tmp_path, name, FILES[name])
    code, out, err = run(capsys, kafka_bootstrap, prefix, "load", str(path), "--json")
    assert code == 0, err
    summary = json.loads(out)
    written = records_in_topic(kafka_bootstrap, prefix + MASTER_DEVICES_TOPIC)
    assert summary["added"] == len(written) > 0
    for key, value in written:
        record = DeviceMaster.FromString(value)
        assert key == f"{record.tenant}/{record.device_id}"
        assert record.site.startswith("plant-")


def test_summary_counts_added_updated_unchanged_and_pruned(
    capsys, tmp_path, kafka_bootstrap, prefix
):
    first = write(
        tmp_path,
        "v1.csv",
        "tenant,device_id,vendor_format,site\nacme,a,f,s1\nacme,b,f,s1\nacme,c,f,s1\n"
        "other,z,f,s1\n",
    )
    code, out, _ = run(capsys, kafka_bootstrap, prefix, "load", str(first), "--json")
    assert code == 0
    assert json.loads(out) | {"topic": ""} == {
        "topic": "",
        "dry_run": False,
        "added": 4,
        "updated": 0,
        "unchanged": 0,
        "deleted": 0,
    }
    # b changes, c disappears (pruned: tenant acme is in the file), d is new; other/z is
    # another tenant's and stays.
    second = write(
        tmp_path,
        "v2.csv",
        "tenant,device_id,vendor_format,site\nacme,a,f,s1\nacme,b,f,s2\nacme,d,f,s1\n",
    )
    code, out, _ = run(
        capsys, kafka_bootstrap, prefix, "load", str(second), "--prune", "--dry-run", "--json"
    )
    expected = {"added": 1, "updated": 1, "unchanged": 1, "deleted": 1}
    assert code == 0 and json.loads(out).items() >= (expected | {"dry_run": True}).items()
    topic = prefix + MASTER_DEVICES_TOPIC
    assert len(records_in_topic(kafka_bootstrap, topic)) == 4, "a dry run wrote something"

    # --prune without --execute (and no terminal to ask at): a dry run that names the victim.
    code, out, err = run(capsys, kafka_bootstrap, prefix, "load", str(second), "--prune", "--json")
    assert code == 0 and json.loads(out).items() >= (expected | {"dry_run": True}).items()
    assert "--prune deletes: acme/c" in err and "would delete 1 device(s)" in err
    assert len(records_in_topic(kafka_bootstrap, topic)) == 4, "an unconfirmed prune wrote"

    code, out, _ = run(
        capsys, kafka_bootstrap, prefix, "load", str(second), "--prune", "--execute", "--json"
    )
    assert code == 0 and json.loads(out).items() >= (expected | {"dry_run": False}).items()
    # Unchanged records are not rewritten: 4 + b + d + the tombstone of c.
    written = records_in_topic(kafka_bootstrap, topic)
    assert len(written) == 7
    assert ("acme/c", None) in written
    code, out, err = run(
        capsys, kafka_bootstrap, prefix, "show", "--tenant", "acme", "--device", "c"
    )
    assert code == 1 and "no master record for acme/c" in err
    code, out, _ = run(
        capsys, kafka_bootstrap, prefix, "show", "--tenant", "other", "--device", "z", "--json"
    )
    assert code == 0 and json.loads(out)["site"] == "s1"
    code, out, _ = run(capsys, kafka_bootstrap, prefix, "load", str(second), "--json")
    assert json.loads(out).items() >= {"added": 0, "updated": 0, "unchanged": 3}.items()


def test_a_bad_file_writes_nothing_and_names_file_and_line(
    capsys, tmp_path, kafka_bootstrap, prefix
):
    good = write(tmp_path, "good.csv", "tenant,device_id,vendor_format\nacme,g1,f\n")
    bad = write(
        tmp_path,
        "bad.yaml",
        "- {tenant: acme, device_id: b1, vendor_format: f}\n- {tenant: acme, vendor_format: f}\n",
    )
    code, out, err = run(capsys, kafka_bootstrap, prefix, "load", str(good), str(bad))
    assert code == 2 and out == ""
    assert err.strip() == (f"headwater master load: {bad}:2: missing required field(s) device_id")
    assert records_in_topic(kafka_bootstrap, prefix + MASTER_DEVICES_TOPIC) == []


def test_put_show_delete_one_device(capsys, kafka_bootstrap, prefix):
    device = ["--tenant", "acme", "--device", "p-1"]
    code, _, err = run(
        capsys,
        kafka_bootstrap,
        prefix,
        "put",
        *device,
        "--vendor-format",
        "acme.v1+json",
        "--site",
        "plant-p",
        "--area-code",
        "A7",
        "--model",
        "m9",
    )
    assert code == 0, err
    code, out, _ = run(capsys, kafka_bootstrap, prefix, "show", *device, "--json")
    assert code == 0
    assert json.loads(out) == {
        "tenant": "acme",
        "device_id": "p-1",
        "site": "plant-p",
        "area_code": "A7",
        "vendor_format": "acme.v1+json",
        "model": "m9",
    }
    # Another tenant's device of the same id is a separate record.
    code, _, err = run(
        capsys, kafka_bootstrap, prefix, "show", "--tenant", "globex", "--device", "p-1"
    )
    assert code == 1
    code, out, _ = run(capsys, kafka_bootstrap, prefix, "delete", *device)
    assert code == 0 and out.strip() == "deleted acme/p-1"
    code, _, err = run(capsys, kafka_bootstrap, prefix, "show", *device)
    assert code == 1 and "no master record for acme/p-1" in err
    assert [k for k, v in records_in_topic(kafka_bootstrap, prefix + MASTER_DEVICES_TOPIC)] == [
        "acme/p-1",
        "acme/p-1",
    ]


def test_put_refuses_a_bad_device_id_and_a_missing_topic_is_explained(capsys, kafka_bootstrap):
    code, _, err = run(
        capsys,
        kafka_bootstrap,
        "nosuch.",
        "put",
        "--tenant",
        "acme",
        "--device",
        "a/b",
        "--vendor-format",
        "f",
    )
    assert code == 2 and "device_id 'a/b' must be" in err
    code, _, err = run(capsys, kafka_bootstrap, "nosuch.", "show", "--tenant", "a", "--device", "b")
    assert code == 2 and "topic nosuch.master.devices.v1 does not exist" in err


def test_the_dev_stack_writes_its_master_data_with_this_tool(capsys, kafka_bootstrap):
    from headwater.topics import all_topics
    from headwater_dev.devstack import supervisor

    (spec,) = [t for t in all_topics(1, 1) if t.name == MASTER_DEVICES_TOPIC]
    ensure_topics(kafka_bootstrap, [spec])
    supervisor._publish_demo_master(kafka_bootstrap)
    code, out, err = run(
        capsys,
        kafka_bootstrap,
        "",
        "show",
        "--tenant",
        supervisor.DEMO_TENANT,
        "--device",
        supervisor.DEMO_DEVICE,
        "--json",
    )
    assert code == 0, err
    assert json.loads(out)["site"] == "plant-dev"


def _load_at_a_terminal(bootstrap: str, prefix: str, path: Path, answer: str) -> str:
    """Run ``master load --prune`` with a real terminal as stdin, typing ``answer``."""
    import os
    import pty
    import subprocess
    import sys

    main_fd, term_fd = pty.openpty()
    try:
        os.write(main_fd, answer.encode() + b"\n")  # typed ahead: read at the prompt
        result = subprocess.run(
            [
                *(sys.executable, "-m", "headwater.cli", "master", "load", str(path), "--prune"),
                *("--bootstrap-servers", bootstrap, "--topic-prefix", prefix),
            ],
            stdin=term_fd,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        os.close(term_fd)
        os.close(main_fd)
    assert result.returncode == 0, result.stderr
    return result.stderr


def test_prune_at_a_terminal_asks_and_deletes_only_when_confirmed(
    capsys, tmp_path, kafka_bootstrap, prefix
):
    both = write(tmp_path, "v1.csv", "tenant,device_id,vendor_format\nacme,a,f\nacme,b,f\n")
    assert run(capsys, kafka_bootstrap, prefix, "load", str(both))[0] == 0
    only_a = write(tmp_path, "v2.csv", "tenant,device_id,vendor_format\nacme,a,f\n")
    topic = prefix + MASTER_DEVICES_TOPIC

    err = _load_at_a_terminal(kafka_bootstrap, prefix, only_a, "no")
    assert "--prune deletes: acme/b" in err and "nothing written" in err
    assert ("acme/b", None) not in records_in_topic(kafka_bootstrap, topic)

    err = _load_at_a_terminal(kafka_bootstrap, prefix, only_a, "1")
    assert "nothing written" not in err
    assert ("acme/b", None) in records_in_topic(kafka_bootstrap, topic)
