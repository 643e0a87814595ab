"""Normalizers users add without forking: a real distribution with an entry point.

A tiny distribution (module + ``.dist-info`` with ``entry_points.txt``, what pip writes on
install) is put on a temporary sys.path; ``importlib.metadata`` finds it like any installed
package, in this process and in a fresh ``headwater normalize`` process.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from headwater.enricher.hop.formats import registry
from headwater.enricher.hop.normalize import normalize_message

PLUGIN = """
from headwater.enricher.plugins import Normalized, load_json, measure


def normalize(payload, media):
    doc = load_json(payload, media)
    return Normalized("telemetry", "example.meter.v1+json", [measure("power", doc["kw"], "kW")])
"""
ENTRY_POINTS = """[headwater.normalizers]
application/vnd.example.meter.v1+json = example_meter:normalize
application/vnd.example.broken+json = example_meter_missing:normalize
application/vnd.acme.telemetry.v1+json = example_meter:normalize
"""


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    site = tmp_path / "site"
    dist = site / "example_meter-0.1.0.dist-info"
    dist.mkdir(parents=True)
    (site / "example_meter.py").write_text(PLUGIN)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: example-meter\nVersion: 0.1.0\n")
    (dist / "entry_points.txt").write_text(ENTRY_POINTS)
    monkeypatch.syspath_prepend(str(site))
    registry.reload_plugins()
    yield site
    monkeypatch.undo()
    sys.modules.pop("example_meter", None)
    registry.reload_plugins()  # forget the plugin: other tests see the built-ins only
    assert "application/vnd.example.meter.v1+json" not in registry.REGISTRY


def test_an_installed_entry_point_is_loaded_and_used(installed: Path) -> None:
    out = normalize_message("application/vnd.example.meter.v1+json", b'{"kw": 1.5}')
    assert out["measurements"] == [
        {"name": "power", "value": 1500.0, "unit": "watt", "time_ms": None}
    ]
    by_type = {e.content_type: e for e in registry.loaded()}
    assert by_type["application/vnd.example.meter.v1+json"].origin == (
        "example-meter 0.1.0: example_meter:normalize"
    )
    # A plugin that does not import is skipped, and says why; the enricher goes on.
    assert "ModuleNotFoundError" in by_type["application/vnd.example.broken+json"].error
    assert normalize_message("application/vnd.example.broken+json", b"{}")["error_reason"] == (
        "UNKNOWN_FORMAT"
    )
    # A plugin cannot take over a built-in format.
    acme = [
        e for e in registry.loaded() if e.content_type == "application/vnd.acme.telemetry.v1+json"
    ]
    assert [e.origin for e in acme if not e.error] == ["builtin"]


def test_the_cli_loads_the_entry_point_in_a_fresh_process(installed: Path, tmp_path: Path) -> None:
    payload = tmp_path / "meter.json"
    payload.write_bytes(b'{"kw": 2}')
    env = os.environ | {"PYTHONPATH": str(installed)}
    cli = [sys.executable, "-m", "headwater.cli", "normalize"]
    listed = subprocess.run(
        [*cli, "--list"], env=env, capture_output=True, text=True, timeout=120, check=True
    )
    assert "application/vnd.example.meter.v1+json\texample-meter 0.1.0" in listed.stdout
    done = subprocess.run(
        [*cli, "-t", "application/vnd.example.meter.v1+json; charset=utf-8", str(payload)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    row = json.loads(done.stdout)["normalized"]
    assert row["measurements"] == [
        {"name": "power", "value": 2000.0, "unit": "watt", "time_ms": None}
    ]
    assert row["source_format"] == "example.meter.v1+json"


def test_the_plugin_api_is_the_hops_own_objects() -> None:
    """headwater.enricher.plugins, docs/enricher.md's import for plugins: the hop's objects."""
    from headwater.enricher import plugins
    from headwater.enricher.hop import formats as hop_formats
    from headwater.enricher.hop import normalize as hop_normalize

    assert plugins.NormalizeError is hop_formats.NormalizeError
    assert plugins.measure is hop_formats.measure
    assert plugins.REGISTRY is registry.REGISTRY
    assert plugins.normalize_message is hop_normalize.normalize_message
    assert plugins.batch_normalizer is hop_formats.batch_normalizer


@pytest.mark.parametrize("old", ["formats", "normalize"])
def test_the_old_plugin_import_paths_warn_and_give_the_same_objects(old: str) -> None:
    """headwater.enricher.formats and .normalize keep working for one release, with a warning."""
    from headwater.enricher import plugins
    from headwater.enricher.hop import formats as hop_formats

    sys.modules.pop(f"headwater.enricher.{old}", None)  # a first import warns, as a plugin's
    with pytest.warns(DeprecationWarning, match=f"headwater.enricher.{old} is deprecated"):
        module = importlib.import_module(f"headwater.enricher.{old}")
    assert {"NormalizeError", "Normalized", "register"} <= set(module.__all__)
    for name in module.__all__:
        # The plugin API's objects; .formats also kept its format modules (acme, ...).
        source = plugins if name in plugins.__all__ else hop_formats
        assert getattr(module, name) is getattr(source, name), name


def test_the_documented_batch_form_runs_as_the_docs_say() -> None:
    """The batch-form example of docs/enricher.md, run through normalize_batch's helpers."""

    from headwater.enricher.hop import media_type
    from headwater.enricher.plugins import NormalizeError, batch_of

    docs = (Path(__file__).parents[2] / "docs" / "enricher.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", docs, flags=re.S)
    (example,) = [b for b in blocks if "@batch_normalizer" in b]
    namespace: dict[str, object] = {}
    exec(textwrap.dedent(example), namespace)
    normalize = namespace["normalize"]
    media = media_type.parse("application/vnd.example.meter.v1+json")
    good, bad = batch_of(normalize)([b'{"kw": 1.5}', b"{}"], media)  # type: ignore[arg-type]
    assert good.measurements[0][:3] == ("power", 1500.0, "watt")
    assert isinstance(bad, NormalizeError) and bad.reason == "PAYLOAD_INVALID"
    assert normalize(b'{"kw": 2}', media).measurements[0][1] == 2000.0  # type: ignore[operator]
