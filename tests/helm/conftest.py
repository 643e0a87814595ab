"""Chart fixtures: rendered values sets, Kubernetes and CRD schemas loaded once (rendering
itself is tests/support/chart.py)."""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonschema
import kubernetes_validate
import pytest

from tests.support.chart import (  # noqa: F401  (re-exported for the test modules)
    CHART,
    CRD_SCHEMAS,
    K8S,
    KUBERNETES_VERSION,
    MINIMAL,
    NAMESPACE,
    RELEASE,
    ROOT,
    VALUES_SETS,
    render,
    render_files,
)


@pytest.fixture(scope="session", params=list(VALUES_SETS))
def rendered(request: pytest.FixtureRequest) -> tuple[str, list[dict[str, Any]]]:
    """(name of the values set, its rendered objects), rendered once per session."""
    return request.param, render(VALUES_SETS[request.param])


def _strict(schema: Any) -> Any:
    """Return ``schema`` with unknown fields refused where the API server would prune them.

    CRD schemas leave additionalProperties open because the API server silently drops
    unknown fields; a typo in a template would then vanish on apply. Refusing them here
    turns that silent loss into a test failure.
    """
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _strict(v) for k, v in schema.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def load_crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """{(apiVersion, kind): strict openAPIV3Schema} for every served version of every fixture."""
    schemas = {}
    for path in sorted(CRD_SCHEMAS.glob("*.json")):
        crd = json.loads(path.read_text())
        for version, schema in crd["versions"].items():
            schemas[(f"{crd['group']}/{version}", crd["kind"])] = _strict(schema)
    assert schemas, f"no CRD schema fixtures in {CRD_SCHEMAS}"
    return schemas


@pytest.fixture(scope="session")
def crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    return load_crd_schemas()


@pytest.fixture(scope="session")
def validate(crd_schemas):
    """Validate one object: CRD schema for custom resources, Kubernetes schema otherwise."""

    def check(obj: dict[str, Any]) -> None:
        key = (obj["apiVersion"], obj["kind"])
        if key in crd_schemas:
            error = jsonschema.exceptions.best_match(
                jsonschema.Draft7Validator(crd_schemas[key]).iter_errors(obj)
            )
            if error is not None:  # the message and path only: the schemas are huge
                raise AssertionError(f"at {error.json_path}: {error.message}")
        else:
            kubernetes_validate.validate(copy.deepcopy(obj), KUBERNETES_VERSION, strict=True)

    return check
