"""``KafkaSettings``: reading ``HEADWATER_KAFKA_*`` and translating for each client (pure units)."""

from __future__ import annotations

from pathlib import Path

import pytest

from headwater.kafka.diagnose import explain
from headwater.kafka.settings import PARTITIONER, KafkaSettings, default_instance
from headwater.runtime.env import SettingError
from tests.support.tls_certs import issue, make_ca


@pytest.fixture
def pem_files(tmp_path: Path) -> dict[str, str]:
    """A real CA and client certificate (aiokafka loads them into an SSL context)."""
    ca, ca_key, ca_cert = make_ca()
    client = issue(ca_key, ca_cert, "headwater-test-client", server=False)
    files = {"ca": ca.cert, "cert": client.cert, "key": client.key}
    for name, body in files.items():
        (tmp_path / name).write_bytes(body)
    return {name: str(tmp_path / name) for name in files}


def _mtls_env(pem_files: dict[str, str]) -> dict[str, str]:
    return {
        "HEADWATER_KAFKA_BOOTSTRAP_SERVERS": "k:9094",
        "HEADWATER_KAFKA_SECURITY_PROTOCOL": "ssl",
        "HEADWATER_KAFKA_SSL_CA_LOCATION": pem_files["ca"],
        "HEADWATER_KAFKA_SSL_CERTIFICATE_LOCATION": pem_files["cert"],
        "HEADWATER_KAFKA_SSL_KEY_LOCATION": pem_files["key"],
        "POD_NAME": "headwater-ingest-7f9c-abcde",
    }


def test_mtls_translates_for_every_client(pem_files):
    kafka = KafkaSettings.from_env(_mtls_env(pem_files))
    rd = kafka.producer_config("headwater-ingest")
    assert rd["security.protocol"] == "ssl"
    assert rd["client.id"] == "headwater-ingest-headwater-ingest-7f9c-abcde"
    assert (rd["ssl.ca.location"], rd["ssl.certificate.location"], rd["ssl.key.location"]) == (
        pem_files["ca"],
        pem_files["cert"],
        pem_files["key"],
    )
    assert (rd["acks"], rd["enable.idempotence"], rd["partitioner"]) == ("all", True, PARTITIONER)
    java = kafka.java_config("headwater-enricher-source")
    assert java["security.protocol"] == "SSL"
    assert java["ssl.keystore.type"] == java["ssl.truststore.type"] == "PEM"
    assert java["ssl.keystore.certificate.chain"] == Path(pem_files["cert"]).read_text()
    assert java["ssl.keystore.key"] == Path(pem_files["key"]).read_text()
    assert java["ssl.keystore.key"].startswith("-----BEGIN PRIVATE KEY-----")  # PKCS#8
    assert java["ssl.truststore.location"] == pem_files["ca"]
    aio = kafka.aiokafka_config("headwater-subscriber-g")
    assert aio["client_id"] == "headwater-subscriber-g-headwater-ingest-7f9c-abcde"
    assert aio["security_protocol"] == "SSL"


def test_scram_becomes_a_jaas_line_with_the_password_quoted():
    kafka = KafkaSettings.from_env(
        {
            "HEADWATER_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
            "HEADWATER_KAFKA_SASL_MECHANISM": "scram-sha-256",
            "HEADWATER_KAFKA_SASL_USERNAME": "headwater",
            "HEADWATER_KAFKA_SASL_PASSWORD": 'p"w;x',
        }
    )
    assert kafka.java_config()["sasl.jaas.config"] == (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="headwater" password="p\\"w;x";'
    )
    assert kafka.confluent_config()["sasl.mechanism"] == "SCRAM-SHA-256"
    assert 'p"w;x' not in repr(kafka)  # the password is never printed


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"HEADWATER_KAFKA_SECURITY_PROTOCOL": "TLS"}, "HEADWATER_KAFKA_SECURITY_PROTOCOL"),
        ({"HEADWATER_KAFKA_SECURITY_PROTOCOL": "SASL_SSL"}, "HEADWATER_KAFKA_SASL_MECHANISM"),
        ({"HEADWATER_KAFKA_SASL_MECHANISM": "GSSAPI"}, "HEADWATER_KAFKA_SASL_MECHANISM"),
        ({"HEADWATER_KAFKA_SASL_MECHANISM": "PLAIN"}, "HEADWATER_KAFKA_SASL_USERNAME"),
        ({"HEADWATER_KAFKA_SSL_CERTIFICATE_LOCATION": "/x"}, "HEADWATER_KAFKA_SSL_KEY_LOCATION"),
        ({"HEADWATER_KAFKA_SSL_CA_LOCATION": "/no/such/ca"}, "HEADWATER_KAFKA_SSL_CA_LOCATION"),
    ],
)
def test_unusable_settings_name_the_variable(env, named):
    with pytest.raises(SettingError, match=named):
        KafkaSettings.from_env(env)


def test_the_earlier_ca_name_is_still_read(pem_files):
    kafka = KafkaSettings.from_env({"HEADWATER_KAFKA_SSL_CAFILE": pem_files["ca"]})
    assert kafka.ssl_ca_location == pem_files["ca"]


def test_client_id_instance_and_override():
    assert default_instance({"HOSTNAME": "pod-1"}) == "pod-1"
    assert default_instance({"POD_NAME": "pod-2", "HOSTNAME": "pod-1"}) == "pod-2"
    assert default_instance({}).rsplit("-", 1)[1].isdigit()  # host and pid
    fixed = KafkaSettings.from_env({"HEADWATER_KAFKA_CLIENT_ID": "fixed"})
    assert fixed.confluent_config("headwater-ops")["client.id"] == "fixed"


@pytest.mark.parametrize(
    ("text", "named"),
    [
        (
            "SASL authentication error: Authentication failed during authentication due to "
            "invalid credentials with SASL mechanism SCRAM-SHA-512",
            "HEADWATER_KAFKA_SASL_PASSWORD",
        ),
        ("SSL handshake failed: certificate verify failed", "HEADWATER_KAFKA_SSL_CA_LOCATION"),
        (
            "Receive failed: ssl/tls alert bad certificate",
            "HEADWATER_KAFKA_SSL_CERTIFICATE_LOCATION",
        ),
    ],
)
def test_errors_are_explained_by_the_setting(text, named):
    message = explain(text)
    assert message is not None and named in message


def test_other_errors_are_not_blamed_on_a_setting():
    assert explain("Connect to ipv4#127.0.0.1:9092 failed: Connection refused") is None
