"""Deprecated import path, kept for one release: use :mod:`headwater.kafka.settings`."""

from headwater.kafka.settings import *  # noqa: F403
from headwater.kafka.settings import KafkaSettings, resolve_kafka

__all__ = ["KafkaSettings", "resolve_kafka"]
