"""Create and check topics against their declarative description (``headwater.topics``)."""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import KafkaException
from confluent_kafka.admin import NewTopic

from headwater.kafka.diagnose import connected_admin
from headwater.kafka.settings import KafkaSettings, resolve_kafka
from headwater.topics import TopicSpec


@dataclass(frozen=True)
class TopicReport:
    """What ``ensure_topics`` found or did for one topic."""

    name: str
    action: str  # "created", "ok" or "drift"
    detail: str = ""


def ensure_topics(
    kafka: KafkaSettings | str, specs: list[TopicSpec], timeout: float = 15.0
) -> list[TopicReport]:
    """Create the topics that are missing; report partition-count drift of existing ones.

    Existing topics are never changed here: drift is reported so a person can decide.

    Args:
        kafka: The connection (bootstrap servers alone: security from ``HEADWATER_KAFKA_*``).
        specs: The topics as described.
        timeout: Seconds for each request.

    Raises:
        headwater.kafka.diagnose.KafkaSetupError: login or TLS refused (names the setting).
    """
    admin = connected_admin(resolve_kafka(kafka), "headwater-topics", timeout)
    existing = admin.list_topics(timeout=timeout).topics
    reports: list[TopicReport] = []
    missing = [s for s in specs if s.name not in existing]
    for spec in specs:
        if spec.name in existing:
            have = len(existing[spec.name].partitions)
            if have != spec.partitions:
                detail = f"has {have} partitions, described with {spec.partitions}"
                reports.append(TopicReport(spec.name, "drift", detail))
            else:
                reports.append(TopicReport(spec.name, "ok"))
    if missing:
        futures = admin.create_topics(
            [
                NewTopic(s.name, s.partitions, s.replication_factor, config=s.config)
                for s in missing
            ],
            operation_timeout=timeout,
        )
        for name, future in futures.items():
            try:
                future.result(timeout=timeout)
            except KafkaException as exc:
                if exc.args[0].name() != "TOPIC_ALREADY_EXISTS":
                    raise
            reports.append(TopicReport(name, "created"))
    return reports
