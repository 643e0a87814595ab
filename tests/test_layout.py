"""The wall between production and dev tooling (issues 25 and 34).

No production module imports the dev tooling (``headwater_dev``, in ``dev/``: the dev stack
and the benchmarks). Imports are read statically (``ast``), function-level ones included, so
a lazy import inside a command cannot slip through either. And the production wheel, built
here, ships no dev module and no line of dev tooling.
"""

from __future__ import annotations

import ast
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from tests.support.wheel import build_wheel

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
    "headwater.ids",
    "headwater.record_headers",
    "headwater.errors",
)

#: Dev tooling that production must not import: the headwater-dev distribution (dev/).
DEV_TOOLING = ("headwater_dev",)

#: Where dev tooling would sit in the production wheel (it had these rooms before issue 34).
WHEEL_DEV_PATHS = (
    "headwater_dev/",
    "headwater/devstack/",
    "headwater/bench/",
    "headwater/enricher/bench/",
    "headwater/enricher/python_operator/",
)


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
    return _imports_of(module, path, path.read_text())


def _imports_of(module: str, path: Path, text: str) -> Iterator[tuple[int, str]]:
    """Every module ``text`` (the file at ``path``) imports, as :func:`_imports`."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(text, str(path))):
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
        if not _in(module, PRODUCTION):
            continue
        for line, imported in _imports(module, path):
            if _in(imported, DEV_TOOLING):
                found.append(f"{path.relative_to(ROOT)}:{line} imports {imported}")
    return found


def test_no_production_module_imports_the_dev_stack_or_a_benchmark() -> None:
    assert production_imports_of_dev_tooling() == []


def _dev_modules() -> Iterator[tuple[str, Path]]:
    """Every module of the dev tooling (``dev/headwater_dev``) as (dotted name, file)."""
    folder = ROOT / "dev" / "headwater_dev"
    for path in sorted(folder.rglob("*.py")):
        parts = [p for p in path.relative_to(folder).with_suffix("").parts if p != "__init__"]
        yield ".".join(["headwater_dev", *parts]), path


def two_way_package_ties(modules: list[tuple[str, Path]]) -> list[tuple[str, str]]:
    """Pairs of packages that import each other (a package and its own parent excepted)."""
    package = {m: m if p.name == "__init__.py" else m.rsplit(".", 1)[0] for m, p in modules}
    edges = set()
    for module, path in modules:
        for _, imported in _imports(module, path):
            a, b = package[module], package.get(imported)
            if b and a != b and not a.startswith(b + ".") and not b.startswith(a + "."):
                edges.add((a, b))
    return sorted((a, b) for a, b in edges if (b, a) in edges and a < b)


def test_no_two_packages_import_each_other() -> None:
    # A two-way tie means neither package can be read, tested or moved without the other;
    # what both need belongs below both (as gateway.fields under app and connectors).
    modules = [*_modules(), *_dev_modules()]
    assert len(modules) > 200
    assert two_way_package_ties(modules) == []


def test_the_tie_check_finds_two_packages_importing_each_other(tmp_path: Path) -> None:
    files = {
        "p.a.x": "from p.b.y import thing\n",
        "p.b.y": "def f():\n    from p.a import x\n",
        "p.b.z": "import p.c.w\n",  # one way: no tie
        "p.c.w": "from p.b import y\n",  # ...and back: a tie
        "p.a.v": "from p import u\n",  # a parent: never a tie
        "p.u": "from p.a import v\n",
    }
    modules = []
    for name, text in files.items():
        path = tmp_path / (name.replace(".", "_") + ".py")
        path.write_text(text)
        modules.append((name, path))
    assert two_way_package_ties(modules) == [("p.a", "p.b"), ("p.b", "p.c")]


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
        ("import headwater_dev.devstack.broker", "headwater_dev.devstack.broker"),
        ("from headwater_dev import bench", "headwater_dev.bench"),
        ("def f():\n    from headwater_dev.devstack.readback import read_topic", "headwater_dev"),
        ("from ..bench import command_bench", "headwater.bench.command_bench"),
    ],
)
def test_imports_are_resolved(tmp_path: Path, source: str, expected: str) -> None:
    path = tmp_path / "mod.py"
    path.write_text(source)
    seen = {imported for _, imported in _imports("headwater.ops.mod", path)}
    assert any(_in(s, (expected,)) for s in seen), seen


# -- the production wheel ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def wheel_python(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Every Python file of the production wheel as it ships: name in the wheel -> text."""
    with zipfile.ZipFile(build_wheel(tmp_path_factory.mktemp("wheel"))) as wheel:
        return {
            name: wheel.read(name).decode()
            for name in wheel.namelist()
            if name.endswith(".py") and not name.startswith("headwater/proto/")
        }


def dev_tooling_lines(python: Mapping[str, str]) -> dict[str, int]:
    """Lines per file of dev tooling among ``python`` (wheel name -> text).

    Dev tooling is a file in a dev room or one that imports dev tooling.
    """
    found = {}
    for name, text in python.items():
        module = name.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
        path = Path(name)
        in_dev_room = name.startswith(WHEEL_DEV_PATHS)
        imports_dev = any(
            _in(imported, DEV_TOOLING) for _, imported in _imports_of(module, path, text)
        )
        if in_dev_room or imports_dev:
            found[name] = len(text.splitlines())
    return found


@pytest.mark.parametrize("room", WHEEL_DEV_PATHS)
def test_the_production_wheel_lists_no_dev_module(wheel_python, room):
    assert [name for name in wheel_python if name.startswith(room)] == []


def test_the_production_wheels_python_has_no_line_of_dev_tooling(wheel_python):
    assert dev_tooling_lines(wheel_python) == {}
    # ... and it is production code: the services, the libraries, the command.
    assert {
        "headwater/cli.py",
        "headwater/ingest/rpc/server.py",
        "headwater/gateway/spool.py",
    } <= set(wheel_python)


def test_dev_tooling_lines_finds_dev_rooms_and_importers_of_dev_tooling():
    python = {
        "headwater/devstack/broker.py": "x = 1\ny = 2\n",
        "headwater/ops/sneaky.py": "def f():\n    from headwater_dev.devstack import broker\n",
        "headwater/ops/relative.py": "from .. import topics\n",
        "headwater/enricher/bench/query.py": "import headwater_dev\n",
    }
    assert dev_tooling_lines(python) == {
        "headwater/devstack/broker.py": 2,
        "headwater/ops/sneaky.py": 2,
        "headwater/enricher/bench/query.py": 1,
    }
