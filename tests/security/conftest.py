"""One Apache Kafka with a SASL_SSL (SCRAM-SHA-512) and an mTLS listener, and its test CA.

The broker is the embedded one with two more client listeners; the CA, the broker's and a
client's certificates are made here for the run. Clients get ``KafkaSettings`` exactly as
production reads them from ``HEADWATER_KAFKA_*`` (``headwater.runtime.env``), so the test goes
through the same translation into librdkafka, aiokafka and Java properties.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from headwater.kafka.settings import KafkaSettings
from headwater_dev.devstack.broker import EmbeddedBroker
from headwater_dev.devstack.ports import free_port
from tests.support.tls_certs import Pem, issue, make_ca

USER = "headwater-test"
PASSWORD = "scram-Pa55-word"


@dataclass(frozen=True)
class SecureKafka:
    """Where the secured broker listens and the files its clients need."""

    plaintext: str
    sasl_ssl: str
    mtls: str
    ca: Path
    other_ca: Path
    client_cert: Path
    client_key: Path

    def sasl_env(self, **overrides: str) -> dict[str, str]:
        """``HEADWATER_KAFKA_*`` for the SASL_SSL listener (SCRAM-SHA-512, the test CA)."""
        return {
            "HEADWATER_KAFKA_BOOTSTRAP_SERVERS": self.sasl_ssl,
            "HEADWATER_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
            "HEADWATER_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
            "HEADWATER_KAFKA_SASL_USERNAME": USER,
            "HEADWATER_KAFKA_SASL_PASSWORD": PASSWORD,
            "HEADWATER_KAFKA_SSL_CA_LOCATION": str(self.ca),
        } | overrides

    def mtls_env(self, **overrides: str) -> dict[str, str]:
        """``HEADWATER_KAFKA_*`` for the mTLS listener (client certificate and key)."""
        return {
            "HEADWATER_KAFKA_BOOTSTRAP_SERVERS": self.mtls,
            "HEADWATER_KAFKA_SECURITY_PROTOCOL": "SSL",
            "HEADWATER_KAFKA_SSL_CA_LOCATION": str(self.ca),
            "HEADWATER_KAFKA_SSL_CERTIFICATE_LOCATION": str(self.client_cert),
            "HEADWATER_KAFKA_SSL_KEY_LOCATION": str(self.client_key),
        } | overrides

    def settings(self, listener: str, **overrides: str) -> KafkaSettings:
        """``KafkaSettings`` read from the environment of ``listener`` (sasl or mtls)."""
        env = self.sasl_env(**overrides) if listener == "sasl" else self.mtls_env(**overrides)
        return KafkaSettings.from_env(env)


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    path.chmod(0o600)
    return path


@pytest.fixture(scope="session")
def secure_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureKafka]:
    """A broker with PLAINTEXT (set-up only), SASL_SSL and mTLS (client auth required)."""
    d = tmp_path_factory.mktemp("secure-kafka")
    ca_pem, ca_key, ca_cert = make_ca("headwater-test-kafka-ca")
    other_pem, _, _ = make_ca("some-other-ca")
    server: Pem = issue(ca_key, ca_cert, "127.0.0.1", server=True)
    client: Pem = issue(ca_key, ca_cert, "headwater-test-client", server=False)
    ca = _write(d / "ca.crt", ca_pem.cert)
    # The broker's PEM key store: its PKCS#8 key and certificate in one file.
    keystore = _write(d / "broker.pem", server.key + server.cert)
    sasl_port, mtls_port = free_port(), free_port()
    tls = {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(keystore),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(ca),
    }
    config = {
        **{f"listener.name.sasl_ssl.{k}": v for k, v in tls.items()},
        **{f"listener.name.mtls.{k}": v for k, v in tls.items()},
        "listener.name.mtls.ssl.client.auth": "required",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": (
            "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        ),
    }
    broker = EmbeddedBroker(
        log_path=d / "server.log",
        config=config,
        extra_listeners={"SASL_SSL": ("SASL_SSL", sasl_port), "MTLS": ("SSL", mtls_port)},
        scram_credentials=[f"SCRAM-SHA-512=[name={USER},password={PASSWORD}]"],
    )
    with broker:
        yield SecureKafka(
            plaintext=broker.bootstrap_servers,
            sasl_ssl=f"127.0.0.1:{sasl_port}",
            mtls=f"127.0.0.1:{mtls_port}",
            ca=ca,
            other_ca=_write(d / "other-ca.crt", other_pem.cert),
            client_cert=_write(d / "client.crt", client.cert),
            client_key=_write(d / "client.key", client.key),
        )
