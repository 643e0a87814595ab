"""The wall between production and dev tooling: no production module imports the dev stack or
the benchmarks (issue 25). Imports are read statically (``ast``), function-level ones included,
so a lazy import inside a command cannot slip through either.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Where each installed package's files are (pyproject's ``package-dir``).
PACKAGE_DIRS = {
    "headwater": ROOT / "src" / "headwater",
    "headwater.ingest": ROOT / "services" / "ingest",
    "headwater.enricher": ROOT / "services" / "enricher",
}

#: What runs in production: the services, the gateway library, the subscriber, the operator
#: commands and the shared rooms and contract modules they stand on.
PRODUCTION = (
    "headwater.ingest",
    "headwater.enricher",
    "headwater.gateway",
    "headwater.subscriber",
    "headwater.ops",
    "headwater.master",
    "headwater.commands",
    "headwater.kafka",
    "headwater.runtime",
    "headwater.contracts",
    "headwater.topics",
    "headwater.endpoints",
    "headwater.wire",
    "headwater.record_headers",
    "headwater.errors",
)

#: Dev tooling that production must not import.
DEV_TOOLING = ("headwater.devstack", "headwater.bench")


def _is_bench(module: str) -> bool:
    """The enricher's own benchmarks (headwater.enricher.bench.*) are dev tooling too."""
    return module.startswith("headwater.enricher.bench")


def _modules() -> Iterator[tuple[str, Path]]:
    """Every module of the installed packages as (dotted name, file)."""
    for package, folder in PACKAGE_DIRS.items():
        for path in sorted(folder.rglob("*.py")):
            rel = path.relative_to(folder).with_suffix("")
            if package == "headwater" and rel.parts[0] == "proto":
                continue  # generated code
            parts = [p for p in rel.parts if p != "__init__"]
            yield ".".join([package, *parts]), path


def _in(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _imports(module: str, path: Path) -> Iterator[tuple[int, str]]:
    """Every module ``path`` imports, absolute, with its line (``from a import b``: a and a.b)."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                anchor = anchor if is_package else anchor[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            yield node.lineno, base
            for alias in node.names:
                yield node.lineno, f"{base}.{alias.name}"


def production_imports_of_dev_tooling() -> list[str]:
    found = []
    for module, path in _modules():
        if not _in(module, PRODUCTION) or _is_bench(module):
            continue
        for line, imported in _imports(module, path):
            if _in(imported, DEV_TOOLING) or _is_bench(imported):
                found.append(f"{path.relative_to(ROOT)}:{line} imports {imported}")
    return found


def test_no_production_module_imports_the_dev_stack_or_a_benchmark() -> None:
    assert production_imports_of_dev_tooling() == []


def test_the_check_sees_production_modules_and_their_function_level_imports() -> None:
    modules = dict(_modules())
    assert {
        "headwater.ops.dlq",
        "headwater.ingest.rpc.server",
        "headwater.enricher.driver.job",
    } <= set(modules)
    # A lazy import inside a function is seen (headwater.master.store reads lazily).
    lazy = {
        imported
        for _, imported in _imports("headwater.master.store", modules["headwater.master.store"])
    }
    assert "headwater.kafka.read" in lazy


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import headwater.devstack.broker", "headwater.devstack.broker"),
        ("from headwater import bench", "headwater.bench"),
        ("def f():\n    from headwater.devstack.readback import read_topic", "headwater.devstack"),
        ("from ..devstack import broker", "headwater.devstack.broker"),
    ],
)
def test_imports_are_resolved(tmp_path: Path, source: str, expected: str) -> None:
    path = tmp_path / "mod.py"
    path.write_text(source)
    seen = {imported for _, imported in _imports("headwater.ops.mod", path)}
    assert any(_in(s, (expected,)) for s in seen), seen
