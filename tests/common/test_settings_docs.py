"""The settings tables in the docs are generated from the declarations, and a stale one fails."""

from __future__ import annotations

import importlib
import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

from headwater.runtime.settings import Settings
from tests.support.libraries import library_modules

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "settings_docs.py"


def _script():
    spec = importlib.util.spec_from_file_location("settings_docs", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_settings_table_in_the_docs_is_current():
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr  # run `make docs` and commit the tables


def test_a_stale_table_is_found_and_rewritten(tmp_path, capsys):
    docs = _script()
    readme = tmp_path / "README.md"
    shutil.copy(ROOT / "README.md", readme)
    current = readme.read_text()
    row = "| `HEADWATER_KAFKA_BOOTSTRAP_SERVERS` | `127.0.0.1:9092` |"
    assert row in current
    readme.write_text(current.replace(row, "| `HEADWATER_KAFKA_BOOTSTRAP_SERVERS` | `:9092` |"))
    assert docs.main(["--check", str(readme)]) == 1
    assert f"{readme}: settings table is stale" in capsys.readouterr().err
    assert docs.main([str(readme)]) == 0
    assert readme.read_text() == current
    assert docs.main(["--check", str(readme)]) == 0


def _settings_classes() -> set[str]:
    for name in library_modules():
        importlib.import_module(name)
    found, todo = set(), list(Settings.__subclasses__())
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        if cls.__module__.startswith("headwater."):
            found.add(f"{cls.__module__}.{cls.__qualname__}")
    return found


def test_every_settings_class_of_the_libraries_has_a_table_in_the_docs():
    marked = set()
    for name in _script().DOCS:
        for classes in re.findall(
            r"<!-- settings: ([\w., ]+?)(?: fields)? -->", (ROOT / name).read_text()
        ):
            marked |= {c.strip() for c in classes.split(",")}
    classes = _settings_classes()
    assert "headwater.kafka.settings.KafkaSettings" in classes
    assert classes - marked == set()
