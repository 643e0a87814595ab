"""The CRD validation fixtures: complete, traceable, and strict enough to catch mistakes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from .conftest import CRD_SCHEMAS, K8S, ROOT, render

SCRIPT = ROOT / "scripts" / "crd_fixture.py"
#: The operators whose resources the chart and k8s/ create (a new kind of another group
#: fails test_render: the Kubernetes schemas do not know it).
OPERATOR_GROUPS = {"kafka.strimzi.io", "sparkoperator.k8s.io", "monitoring.coreos.com"}

CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {
        "group": "example.com",
        "names": {"kind": "Widget", "plural": "widgets"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "description": "A widget.",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "required": ["size"],
                                "properties": {
                                    "size": {"type": "integer", "minimum": 1, "default": 3},
                                    "mode": {"type": "string", "enum": ["a", "b"]},
                                    "name": {"type": "string", "pattern": "^[a-z]+$"},
                                    # A field called "description" is data, not a keyword.
                                    "description": {"type": "string", "description": "text"},
                                    "extra": {"x-kubernetes-preserve-unknown-fields": True},
                                    "items": {
                                        "type": "array",
                                        "items": {"anyOf": [{"type": "integer"}]},
                                    },
                                },
                            }
                        },
                    }
                },
            },
            {"name": "v0", "served": False, "schema": {"openAPIV3Schema": {"type": "object"}}},
        ],
    },
}


def test_script_keeps_the_validation_structure_and_notes_the_upstream(tmp_path: Path):
    source = tmp_path / "widgets.yaml"
    source.write_text(yaml.safe_dump(CRD))
    out = tmp_path / "widgets.json"
    args = ["--operator", "Widget Operator", "--operator-version", "1.2.3"]
    args += ["--source", "example/widgets @ abc", "--output", str(out)]
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(source), *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    fixture = json.loads(out.read_text())
    assert fixture["upstream"]["operator"] == "Widget Operator"
    assert fixture["upstream"]["version"] == "1.2.3"
    assert fixture["upstream"]["source"].startswith("example/widgets @ abc (widgets.yaml, sha256 ")
    assert (fixture["group"], fixture["kind"], list(fixture["versions"])) == (
        "example.com",
        "Widget",
        ["v1"],  # served versions only
    )
    spec = fixture["versions"]["v1"]["properties"]["spec"]
    assert spec["required"] == ["size"]
    assert spec["properties"]["size"] == {"type": "integer", "minimum": 1}  # no default
    assert spec["properties"]["mode"]["enum"] == ["a", "b"]
    assert spec["properties"]["name"]["pattern"] == "^[a-z]+$"
    assert spec["properties"]["description"] == {"type": "string"}
    assert spec["properties"]["extra"] == {"x-kubernetes-preserve-unknown-fields": True}
    assert spec["properties"]["items"]["items"] == {"anyOf": [{"type": "integer"}]}
    assert "description" not in fixture["versions"]["v1"]


def test_script_refuses_a_file_that_is_not_a_crd(tmp_path: Path):
    source = tmp_path / "cm.yaml"
    source.write_text("apiVersion: v1\nkind: ConfigMap\n")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(source), "--operator", "x", "--source", "y"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 2 and "not a CustomResourceDefinition" in done.stderr


@pytest.mark.parametrize("path", sorted(CRD_SCHEMAS.glob("*.json")), ids=lambda p: p.stem)
def test_each_fixture_names_its_operator_version_and_source(path: Path):
    fixture = json.loads(path.read_text())
    upstream = fixture["upstream"]
    assert upstream["operator"] and upstream["version"] and "sha256" in upstream["source"]
    assert fixture["versions"], "no served version"


def test_every_custom_resource_we_ship_has_a_fixture(crd_schemas):
    """A chart or k8s/ object of an operator's kind must not bypass its schema."""
    everything = render({}) + render(yaml.safe_load((K8S / "values-production.yaml").read_text()))
    for manifest in sorted(K8S.glob("*.yaml")):
        everything += [d for d in yaml.safe_load_all(manifest.read_text()) if d]
    custom = {
        (o["apiVersion"], o["kind"])
        for o in everything
        if str(o.get("apiVersion")).split("/")[0] in OPERATOR_GROUPS  # values files have none
    }
    assert {api.split("/")[0] for api, _ in custom} == OPERATOR_GROUPS
    assert custom <= set(crd_schemas), custom - set(crd_schemas)


def test_fixture_refuses_wrong_types_bad_enums_and_unknown_fields(validate):
    topic = {
        "apiVersion": "kafka.strimzi.io/v1",
        "kind": "KafkaTopic",
        "metadata": {"name": "t"},
        "spec": {"partitions": 3, "replicas": 3},
    }
    validate(topic)
    for bad_spec in (
        {"partitions": "three", "replicas": 3},
        {"partitions": 3, "replicas": 3, "partitons": 6},  # typo: pruned silently by the API
    ):
        with pytest.raises(AssertionError):
            validate({**topic, "spec": bad_spec})
    rule = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "r"},
        "spec": {"groups": [{"name": "g", "rules": [{"alert": "A", "expr": "up == 0"}]}]},
    }
    validate(rule)
    with pytest.raises(AssertionError):
        validate({**rule, "spec": {"groups": [{"rules": []}]}})  # group name is required
