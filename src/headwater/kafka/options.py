"""The Kafka options of every ``headwater`` command that talks to Kafka, declared once.

Each flag comes from its declaration in :class:`~headwater.kafka.settings.KafkaSettings`
(``--bootstrap-servers``, ``--security-protocol``, ``--sasl-*``, ``--ssl-*``) or
:class:`TopicPrefix` (``--topic-prefix``); a flag left out falls back to its variable, so a
command on a pod configured by the chart needs none of them. Secrets have no flag: they come
from the environment only. Standard library only: command groups register without extras.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import ClassVar

from headwater.kafka.settings import KafkaSettings
from headwater.runtime.settings import Settings, setting


@dataclass(frozen=True)
class TopicPrefix(Settings):
    """The prefix of the pipeline's topic names: the enricher's, so both name the same topics."""

    env_prefix: ClassVar[str] = "HEADWATER_ENRICHER_"

    topic_prefix: str = setting(
        "", help="prefix of the topic names, as the enricher's (none: the plain names)", flag=True
    )


def add_kafka_options(parser: argparse.ArgumentParser, *, topic_prefix: bool = False) -> None:
    """Add the Kafka connection flags (and ``--topic-prefix`` when asked) to ``parser``."""
    group = parser.add_argument_group(
        "Kafka", "connection and security; a flag left out is read from its variable"
    )
    KafkaSettings.add_arguments(group)
    if topic_prefix:
        TopicPrefix.add_arguments(group)


def kafka_from_args(args: argparse.Namespace) -> KafkaSettings:
    """Return the Kafka settings of a command: its flags over ``HEADWATER_KAFKA_*``."""
    return KafkaSettings.from_args(args)


def topic_prefix_from_args(args: argparse.Namespace) -> str:
    """Return the topic prefix of a command: ``--topic-prefix`` over its variable."""
    return TopicPrefix.from_args(args).topic_prefix
