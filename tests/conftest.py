"""Session-wide real parts: one Apache Kafka broker (KRaft, on loopback) for the whole run."""

from __future__ import annotations

import importlib
import os
import pkgutil
import uuid
from collections.abc import Callable, Iterator

import hypothesis
import pytest

from headwater.kafka.admin import ensure_topics
from headwater.topics import TopicSpec
from headwater_dev.devstack.broker import EmbeddedBroker

#: Fixtures shared across test packages (fixtures out of test modules: tests/support).
#: The process guard fails a test that leaves a process running (tests/support/process_guard.py);
#: pytester runs whole pytest sessions, to prove it.
pytest_plugins = [
    "tests.support.ingest",
    "tests.support.process_guard",
    "tests.support.cluster",
    "tests.support.spark_standalone",
    "pytester",
]


def _import_hypothesis_now() -> None:
    """Import every module of hypothesis while the stack is shallow.

    pytest rewrites the asserts of every module of a distribution that provides a pytest
    plugin (hypothesis does), at import. Hypothesis imports some of its modules lazily, deep in
    a running test (the shrinker, the optimiser), and CPython 3.11.7's ``ast.parse`` can then
    fail with "SystemError: AST constructor recursion depth mismatch" (python/cpython#106905,
    fixed in 3.11.8): a test failed that way. Importing them here parses them at depth ~0.
    """
    for module in pkgutil.walk_packages(hypothesis.__path__, "hypothesis."):
        if module.name.startswith("hypothesis.extra."):
            continue  # integrations with libraries we do not use
        try:
            importlib.import_module(module.name)
        except Exception:  # optional parts whose libraries are absent
            continue


_import_hypothesis_now()


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Bootstrap servers of a real broker: HEADWATER_TEST_KAFKA, or the embedded Apache Kafka."""
    external = os.environ.get("HEADWATER_TEST_KAFKA")
    if external:
        yield external
        return
    log = tmp_path_factory.mktemp("broker") / "server.log"
    with EmbeddedBroker(log_path=log) as broker:
        yield broker.bootstrap_servers


@pytest.fixture
def topic_factory(kafka_bootstrap: str) -> Callable[..., str]:
    """Create a topic with a unique name and return the name."""

    def make(prefix: str = "t", partitions: int = 1, config: dict[str, str] | None = None) -> str:
        name = f"{prefix}.{uuid.uuid4().hex[:12]}"
        ensure_topics(kafka_bootstrap, [TopicSpec(name, partitions, 1, config or {})])
        return name

    return make
