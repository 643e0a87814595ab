"""Session-wide real parts: one Apache Kafka broker (KRaft, on loopback) for the whole run."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator

import pytest

from headwater.kafka.admin import ensure_topics
from headwater.topics import TopicSpec
from headwater_dev.devstack.broker import EmbeddedBroker

#: Fixtures shared across test packages (fixtures out of test modules: tests/support).
pytest_plugins = ["tests.support.ingest", "tests.support.cluster"]


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
