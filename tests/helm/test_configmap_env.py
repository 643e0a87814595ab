"""Every ``HEADWATER_*`` variable the chart sets is one the code reads (issue 25).

The chart spells each name again in its ConfigMaps and pod specs; a typo, or a setting that
was renamed or removed in the code, would be ignored silently by the service. The names the
code reads are recorded while the settings classes read an environment
(:func:`headwater.runtime.env.recording`), so the list is the code's own.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from headwater.enricher.driver.settings import EnricherSettings
from headwater.ingest.settings import IngestSettings
from headwater.kafka.settings import KafkaSettings
from headwater.runtime.env import recording
from headwater.runtime.logs import log_level
from tests.support.chart import VALUES_SETS, render

#: Every optional branch of the chart's settings on: SASL, mTLS to Kafka and from gateways,
#: the enricher with a starting position.
EVERYTHING: dict[str, Any] = {
    "kafka": {
        "securityProtocol": "SASL_SSL",
        "tls": {"caSecret": "kafka-ca", "clientSecret": "kafka-user"},
        "sasl": {"mechanism": "SCRAM-SHA-512", "username": "hw", "passwordSecret": "hw-pass"},
    },
    "ingest": {"tls": {"secretName": "ingest-tls", "mtls": True}},
    "enricher": {"enabled": True, "startingOffsets": "earliest"},
}


def read_by_the_code() -> set[str]:
    """Every ``HEADWATER_*`` name the settings classes of the chart's processes read."""
    env = {"HEADWATER_INGEST_ALLOW_UNAUTHENTICATED": "true"}
    with recording() as reads:
        IngestSettings.from_env(env)  # reads HEADWATER_KAFKA_* too
        EnricherSettings.from_env(env)
        KafkaSettings.from_env(env)
        log_level(env)
    return set(reads)


def _env_names(node: Any) -> Iterator[str]:
    """Names of every ``env:`` entry below ``node`` (containers, SparkApplication pods)."""
    if isinstance(node, dict):
        env = node.get("env")
        for entry in env if isinstance(env, list) else []:
            if isinstance(entry, dict) and "name" in entry:
                yield entry["name"]
        for value in node.values():
            yield from _env_names(value)
    elif isinstance(node, list):
        for value in node:
            yield from _env_names(value)


def set_by_the_chart(values: dict[str, Any]) -> dict[str, str]:
    """Every ``HEADWATER_*`` name the chart sets with ``values``, with the object setting it."""
    found: dict[str, str] = {}
    for obj in render(copy.deepcopy(values)):
        where = f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"
        names = list(obj.get("data") or {}) if obj.get("kind") == "ConfigMap" else []
        names += list(_env_names(obj.get("spec")))
        for name in names:
            if name.startswith("HEADWATER_"):
                found.setdefault(name, where)
    return found


@pytest.mark.parametrize("values_set", [*VALUES_SETS, "everything"])
def test_every_headwater_variable_of_the_chart_is_read_by_a_settings_class(
    values_set: str,
) -> None:
    values = EVERYTHING if values_set == "everything" else VALUES_SETS[values_set]
    known = read_by_the_code()
    unread = {n: w for n, w in set_by_the_chart(values).items() if n not in known}
    assert unread == {}, f"set by the chart, read by no settings class: {unread}"


def test_the_check_sees_every_branch() -> None:
    names = set(set_by_the_chart(EVERYTHING))
    assert {
        "HEADWATER_KAFKA_SASL_MECHANISM",
        "HEADWATER_KAFKA_SASL_PASSWORD",
        "HEADWATER_KAFKA_SSL_CERTIFICATE_LOCATION",
        "HEADWATER_INGEST_TLS_CLIENT_CA_FILE",
        "HEADWATER_ENRICHER_STARTING_OFFSETS",
        "HEADWATER_LOG_LEVEL",
    } <= names
    assert "HEADWATER_INGEST_NO_SUCH_SETTING" not in read_by_the_code()
