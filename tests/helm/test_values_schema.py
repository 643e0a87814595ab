"""values.schema.json and the chart's own checks refuse bad values with a clear message."""

from __future__ import annotations

import pytest

from .conftest import render


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"bogus": 1}, "additional properties 'bogus' not allowed"),
        ({"ingest": {"replicaz": 2}}, "additional properties 'replicaz' not allowed"),
        ({"ingest": {"replicas": -1}}, "/ingest/replicas"),
        ({"enricher": {"executor": {"instances": 0}}}, "/enricher/executor/instances"),
        ({"enricher": {"kafkaIO": "jvm"}}, "additional properties 'kafkaIO' not allowed"),
        ({"enricher": {"startingOffsets": "none"}}, "/enricher/startingOffsets"),
        ({"enricher": {"driver": {"memory": "2GB"}}}, "/enricher/driver/memory"),
        ({"image": {"tag": "latest"}}, "/image/tag"),
        ({"enricher": {"image": {"tag": "latest"}}}, "/enricher/image/tag"),
        ({"kafka": {"securityProtocol": "TLS"}}, "/kafka/securityProtocol"),
        ({"kafka": {"bootstrapServers": ""}}, "/kafka/bootstrapServers"),
        ({"ingest": {"limits": {"maxPayloadBytes": 10_000_000}}}, "/ingest/limits/maxPayloadBytes"),
        ({"ingest": {"logLevel": "TRACE"}}, "/ingest/logLevel"),
        ({"ingest": {"service": {"type": "ExternalName"}}}, "/ingest/service/type"),
        ({"podSecurityContext": {"runAsNonRoot": False}}, "/podSecurityContext/runAsNonRoot"),
        ({"ingest": {"resources": {"limits": None}}}, "/ingest/resources"),
        ({"ingest": {"resources": {"requests": {"cpu": "lots"}}}}, "/requests/cpu"),
        (
            {
                "ingest": {
                    "auth": {
                        "gateways": [
                            {"id": "g", "tenant": "t", "devices": [], "token_sha256": "not-hex"}
                        ]
                    }
                }
            },
            "/ingest/auth/gateways/0/token_sha256",
        ),
    ],
)
def test_schema_refuses(values, message):
    import helm_python as helm

    with pytest.raises(helm.HelmValuesError, match=message.replace("'", ".")):
        render(values)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"ingest": {"tls": {"mtls": True}}}, "ingest.tls.mtls needs ingest.tls.secretName"),
        ({"topics": {"strimzi": {"enabled": True}}}, "either by Strimzi"),
        ({"topics": {"replicationFactor": 1}}, "minInSyncReplicas cannot exceed"),
        ({"enricher": {"checkpointVolume": {"enabled": False}}}, "checkpointLocation is under"),
        ({"kafka": {"sasl": {"mechanism": "PLAIN", "passwordSecret": "p"}}}, "SASL_PLAINTEXT"),
    ],
)
def test_contradictions_fail_the_render(values, message):
    import helm_python as helm

    with pytest.raises(helm.HelmError, match=message):
        render(values)
