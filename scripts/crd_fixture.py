r"""Turn an upstream CustomResourceDefinition into a validation fixture for the chart tests.

The chart tests validate every rendered custom resource against the schema its operator
publishes. The repository keeps only what validation needs: for each served version, the
structure of ``openAPIV3Schema`` (types, properties, required fields, enums, patterns,
bounds, formats and the ``x-kubernetes-*`` markers that change validation), without
descriptions and defaults. Each fixture names the operator, its version and where the CRD
came from, so moving to a new operator release is one command per CRD::

    python scripts/crd_fixture.py path/to/kafkatopics-crd.yaml \
        --operator "Strimzi" --operator-version 0.48.0 \
        --source "strimzi/strimzi-kafka-operator packaging/install/cluster-operator @ <commit>"

The fixture is written to ``tests/helm/crd_schemas/<group>_<plural>.json`` unless
``--output`` says otherwise.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import yaml

DEFAULT_DIR = Path(__file__).resolve().parents[1] / "tests" / "helm" / "crd_schemas"

#: Keywords that constrain a value; everything else (description, default, example,
#: x-kubernetes-validations written in CEL, ...) is dropped.
KEPT = {
    "type",
    "format",
    "enum",
    "pattern",
    "required",
    "nullable",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "uniqueItems",
    "minProperties",
    "maxProperties",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-int-or-string",
    "x-kubernetes-embedded-resource",
}
#: Keywords whose value is a map of name -> schema (the names are data, never stripped).
SCHEMA_MAPS = {"properties", "patternProperties"}
#: Keywords whose value is a list of schemas.
SCHEMA_LISTS = {"anyOf", "oneOf", "allOf"}
#: Keywords whose value is one schema (or a boolean, for additionalProperties).
SCHEMA_ONE = {"not", "items", "additionalProperties"}


def structure(schema: Any) -> Any:
    """Return the validation structure of one OpenAPI v3 schema node.

    Args:
        schema: a schema node (a dict) or a boolean (``additionalProperties: false``).
    """
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in KEPT:
            out[key] = value
        elif key in SCHEMA_MAPS:
            out[key] = {name: structure(sub) for name, sub in value.items()}
        elif key in SCHEMA_LISTS or (key in SCHEMA_ONE and isinstance(value, list)):
            out[key] = [structure(sub) for sub in value]  # a list: also tuple-style items
        elif key in SCHEMA_ONE:
            out[key] = structure(value)
    return out


def fixture(crd: dict[str, Any], operator: str, version: str, source: str) -> dict[str, Any]:
    """Return the fixture of one CRD: provenance plus the structure of each served version."""
    spec = crd["spec"]
    return {
        "upstream": {"operator": operator, "version": version, "source": source},
        "group": spec["group"],
        "kind": spec["names"]["kind"],
        "versions": {
            v["name"]: structure(v["schema"]["openAPIV3Schema"])
            for v in spec["versions"]
            if v.get("served")
        },
    }


def _guess_version(crd: dict[str, Any]) -> str | None:
    """The operator version some projects stamp on their CRDs (prometheus-operator does)."""
    annotations = crd.get("metadata", {}).get("annotations") or {}
    return annotations.get("operator.prometheus.io/version")


def main(argv: list[str] | None = None) -> int:
    """Write the fixture of the CRD file given as argument; print where it went."""
    parser = argparse.ArgumentParser(
        prog="crd_fixture.py",
        description="Write a chart-test validation fixture from an upstream CRD YAML file.",
    )
    parser.add_argument("crd", type=Path, help="the upstream CustomResourceDefinition (YAML)")
    parser.add_argument("--operator", required=True, help='operator name, e.g. "Strimzi"')
    parser.add_argument(
        "--operator-version",
        help="operator release the CRD belongs to (read from the CRD when it says)",
    )
    parser.add_argument(
        "--source", required=True, help="where the CRD came from: repository, path, commit"
    )
    parser.add_argument("--output", type=Path, help="the JSON file to write")
    args = parser.parse_args(argv)

    raw = args.crd.read_bytes()
    crd = yaml.safe_load(raw)
    if crd.get("kind") != "CustomResourceDefinition":
        parser.error(f"{args.crd} is not a CustomResourceDefinition")
    version = args.operator_version or _guess_version(crd)
    if not version:
        parser.error("--operator-version is required (the CRD does not name one)")
    source = f"{args.source} ({args.crd.name}, sha256 {hashlib.sha256(raw).hexdigest()[:16]})"
    data = fixture(crd, args.operator, version, source)
    output = args.output or DEFAULT_DIR / f"{data['group']}_{crd['spec']['names']['plural']}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
