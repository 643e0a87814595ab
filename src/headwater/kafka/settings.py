"""How every Headwater process connects to Kafka (``HEADWATER_KAFKA_*``).

This is the one place that turns the settings into client properties: librdkafka
(``confluent_kafka``), aiokafka and the Java client (Spark's connector). Every Kafka client in
Headwater takes its security, ``client.id`` and (for producers of keyed records) partitioner
from here, so a cluster that needs SASL_SSL or mTLS is configured once for all of them.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar, Self

from headwater.runtime.env import SettingError, env_str
from headwater.runtime.settings import Renamed, Settings, setting

#: The partitioner of every producer of keyed records. It is the Java client's (and
#: aiokafka's) murmur2 hash, so a device's records land on one partition whichever client
#: wrote them: ingest, the enricher's sink, ``dlq redrive``, master data. librdkafka's own
#: default (consistent_random) hashes differently.
PARTITIONER = "murmur2_random"

#: Where a client looks for Kafka when ``HEADWATER_KAFKA_BOOTSTRAP_SERVERS`` is not set: the
#: dev stack's (and the test suite's) broker on loopback. The one place this default lives.
DEFAULT_BOOTSTRAP_SERVERS = "127.0.0.1:9092"

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def bootstrap_from_env(env: Mapping[str, str] | None = None) -> str:
    """Return ``HEADWATER_KAFKA_BOOTSTRAP_SERVERS``, else :data:`DEFAULT_BOOTSTRAP_SERVERS`."""
    env = os.environ if env is None else env
    return env_str(env, KafkaSettings.variable("bootstrap_servers"), DEFAULT_BOOTSTRAP_SERVERS)


def default_instance(env: Mapping[str, str] | None = None) -> str:
    """Return this process's name for ``client.id``: the pod name, else host and pid.

    Kubernetes sets ``HOSTNAME`` to the pod name (``POD_NAME`` is the chart's downward-API
    variable and wins); elsewhere several processes share a host, so the pid tells them apart.
    """
    env = os.environ if env is None else env
    for name in ("POD_NAME", "HOSTNAME"):
        value = env.get(name, "").strip()
        if value:
            return value
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass(frozen=True)
class KafkaSettings(Settings):
    """Connection, security and producer settings shared by every Kafka client."""

    env_prefix: ClassVar[str] = "HEADWATER_KAFKA_"

    bootstrap_servers: str = setting(
        DEFAULT_BOOTSTRAP_SERVERS,
        help="brokers to connect to (`host:port`, comma-separated)",
        flag=True,
    )
    linger_s: float = setting(
        0.005,
        unit="s",
        help="producer batching delay",
        renamed=(Renamed("HEADWATER_KAFKA_LINGER_MS", scale=0.001),),
    )
    compression_type: str = setting(
        "none", choices=("none", "gzip", "snappy", "lz4", "zstd"), help="producer compression"
    )
    security_protocol: str = setting(
        "PLAINTEXT", choices=PROTOCOLS, help="how to reach the brokers", flag=True
    )
    sasl_mechanism: str = setting(
        "", choices=MECHANISMS, help="SASL mechanism; required with `SASL_*` protocols", flag=True
    )
    sasl_username: str = setting("", help="SASL user", flag=True)
    sasl_password: str = setting("", secret=True, help="SASL password (never printed)")
    ssl_ca_location: str = setting(
        "",
        shown="(system)",
        help="CA bundle (PEM) the brokers' certificates are checked against",
        renamed=(Renamed("HEADWATER_KAFKA_SSL_CAFILE"),),
        flag=True,
    )
    ssl_certificate_location: str = setting(
        "",
        help="client certificate (PEM, chain allowed) for mTLS, e.g. a Strimzi KafkaUser with "
        "`authentication: tls`; with `HEADWATER_KAFKA_SSL_KEY_LOCATION`",
        flag=True,
    )
    ssl_key_location: str = setting(
        "", help="the client certificate's PKCS#8 key (PEM); both or neither", flag=True
    )
    ssl_key_password: str = setting("", secret=True, help="password of an encrypted client key")
    client_id: str = setting(
        "",
        shown="<role>-<pod name or host-pid>",
        help="overrides `client.id`; by default each client is named by its role "
        "(`headwater-ingest`, `headwater-enricher-source`, `headwater-topics`, `headwater-ops`, "
        "`headwater-subscriber-<group>`...) and its process: the pod name (`POD_NAME`, else "
        "`HOSTNAME`), else host and pid",
    )
    #: This process's name in ``client.id`` (the pod name where there is one).
    instance: str = field(default_factory=default_instance)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **given: Any) -> Self:
        """Read and check ``HEADWATER_KAFKA_*``; raise SettingError naming a bad variable."""
        env = os.environ if env is None else env
        return super().from_env(env, **({"instance": default_instance(env)} | given))

    @classmethod
    def from_args(
        cls, args: argparse.Namespace, env: Mapping[str, str] | None = None, **given: Any
    ) -> Self:
        """Read as :meth:`from_env`; the Kafka flags given on the command line win."""
        env = os.environ if env is None else env
        return super().from_args(args, env, **({"instance": default_instance(env)} | given))

    def check(self) -> None:
        """Raise SettingError for settings that need each other, or files that cannot be read."""
        v = self.variable
        protocol = self.security_protocol
        if protocol.startswith("SASL_") and not self.sasl_mechanism:
            raise SettingError(f"{v('security_protocol')}={protocol} needs {v('sasl_mechanism')}")
        if self.sasl_mechanism and not self.sasl_username:
            raise SettingError(f"{v('sasl_mechanism')} is set: set {v('sasl_username')}")
        cert, key = self.ssl_certificate_location, self.ssl_key_location
        if bool(cert) != bool(key):
            raise SettingError(
                f"set both {ENV_CERT} and {ENV_KEY} (the client certificate), or neither"
            )
        for name, path in ((ENV_CA, self.ssl_ca_location), (ENV_CERT, cert), (ENV_KEY, key)):
            if path and not os.access(path, os.R_OK):
                raise SettingError(f"{name}={path!r}: no readable file there")

    @property
    def linger_ms(self) -> int:
        """The batching delay in milliseconds, as the clients take it."""
        return round(self.linger_s * 1000)

    @property
    def uses_tls(self) -> bool:
        """True when the connection to the brokers is encrypted."""
        return self.security_protocol.upper() in ("SSL", "SASL_SSL")

    def client_id_for(self, client_role: str) -> str:
        """Return the ``client.id`` of one client: ``<role>-<instance>`` unless overridden.

        Args:
            client_role: What the client does, e.g. ``headwater-ingest``, ``headwater-dlq``.
        """
        if self.client_id:
            return self.client_id
        return f"{client_role}-{self.instance}" if client_role else self.instance

    # -- librdkafka (confluent_kafka) ----------------------------------------------------------

    def confluent_config(self, client_role: str = "") -> dict[str, Any]:
        """Return the librdkafka configuration for connection, security and ``client.id``."""
        conf: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap_servers,
            "security.protocol": self.security_protocol.lower(),
        }
        if client_role or self.client_id:
            conf["client.id"] = self.client_id_for(client_role)
        if self.sasl_mechanism:
            conf |= {
                "sasl.mechanism": self.sasl_mechanism,
                "sasl.username": self.sasl_username,
                "sasl.password": self.sasl_password,
            }
        if self.ssl_ca_location:
            conf["ssl.ca.location"] = self.ssl_ca_location
        if self.ssl_certificate_location:
            conf["ssl.certificate.location"] = self.ssl_certificate_location
            conf["ssl.key.location"] = self.ssl_key_location
            if self.ssl_key_password:
                conf["ssl.key.password"] = self.ssl_key_password
        return conf

    def producer_config(self, client_role: str) -> dict[str, Any]:
        """Return a librdkafka producer configuration for keyed records.

        Security and ``client.id`` as ``confluent_config``; acks=all with idempotence (no
        record lost or doubled by a retry) and the shared ``PARTITIONER`` (a device keeps its
        partition whichever client wrote it); batching and compression from the settings.
        Callers add what is theirs (timeouts, queue limits, callbacks).
        """
        return self.confluent_config(client_role) | {
            "acks": "all",
            "enable.idempotence": True,
            "partitioner": PARTITIONER,
            "linger.ms": self.linger_ms,
            "compression.type": self.compression_type,
        }

    def consumer_config(self, client_role: str, group_id: str) -> dict[str, Any]:
        """Return a librdkafka consumer configuration of group ``group_id``, without auto commit.

        Offsets are committed only where a caller decides to (``enable.auto.commit`` off);
        callers add ``auto.offset.reset`` and the like, which depend on what they read.
        """
        return self.confluent_config(client_role) | {
            "group.id": group_id,
            "enable.auto.commit": False,
        }

    def admin_config(self, client_role: str) -> dict[str, Any]:
        """Return a librdkafka AdminClient configuration."""
        return self.confluent_config(client_role)

    # -- aiokafka ------------------------------------------------------------------------------

    def aiokafka_config(self, client_role: str) -> dict[str, Any]:
        """Return aiokafka keyword arguments: bootstrap servers, ``client_id`` and security."""
        return {
            "bootstrap_servers": self.bootstrap_servers,
            "client_id": self.client_id_for(client_role),
        } | self.aiokafka_security()

    def aiokafka_security(self) -> dict[str, Any]:
        """Return the aiokafka keyword arguments for security (protocol, SASL, TLS context)."""
        kwargs: dict[str, Any] = {"security_protocol": self.security_protocol.upper()}
        if self.sasl_mechanism:
            kwargs |= {
                "sasl_mechanism": self.sasl_mechanism,
                "sasl_plain_username": self.sasl_username,
                "sasl_plain_password": self.sasl_password,
            }
        if self.uses_tls:
            from aiokafka.helpers import create_ssl_context

            kwargs["ssl_context"] = create_ssl_context(
                cafile=self.ssl_ca_location or None,
                certfile=self.ssl_certificate_location or None,
                keyfile=self.ssl_key_location or None,
                password=self.ssl_key_password or None,
            )
        return kwargs

    # -- Java client (Spark's Kafka connector) -------------------------------------------------

    def java_config(self, client_role: str = "") -> dict[str, str]:
        """Return the Java client properties for connection, security and ``client.id``.

        SASL becomes a JAAS line; the CA a PEM trust store (no keytool step, Java client
        2.7+); the client certificate and key a PEM key store given by content
        (``ssl.keystore.certificate.chain`` / ``ssl.keystore.key``): Spark's executors run
        elsewhere than the driver, and content travels with the options where a path might not
        exist. The Java client hides both as passwords in its logs.
        """
        conf = {
            "bootstrap.servers": self.bootstrap_servers,
            "security.protocol": self.security_protocol.upper(),
        }
        if client_role or self.client_id:
            conf["client.id"] = self.client_id_for(client_role)
        if self.sasl_mechanism:
            module = (
                "org.apache.kafka.common.security.plain.PlainLoginModule"
                if self.sasl_mechanism == "PLAIN"
                else "org.apache.kafka.common.security.scram.ScramLoginModule"
            )
            user, password = (_jaas_quote(v) for v in (self.sasl_username, self.sasl_password))
            conf["sasl.mechanism"] = self.sasl_mechanism
            conf["sasl.jaas.config"] = f"{module} required username={user} password={password};"
        if self.ssl_ca_location:
            conf["ssl.truststore.type"] = "PEM"
            conf["ssl.truststore.location"] = self.ssl_ca_location
        if self.ssl_certificate_location:
            conf["ssl.keystore.type"] = "PEM"
            conf["ssl.keystore.certificate.chain"] = _read_pem(
                ENV_CERT, self.ssl_certificate_location
            )
            conf["ssl.keystore.key"] = _read_pem(ENV_KEY, self.ssl_key_location)
            if self.ssl_key_password:
                conf["ssl.key.password"] = self.ssl_key_password
        return conf


#: The settings named in errors, so a message says which variable to fix.
ENV_PASSWORD = KafkaSettings.variable("sasl_password")
ENV_CA = KafkaSettings.variable("ssl_ca_location")
ENV_CERT = KafkaSettings.variable("ssl_certificate_location")
ENV_KEY = KafkaSettings.variable("ssl_key_location")


def _read_pem(setting: str, path: str) -> str:
    """Return the PEM text at ``path``; an unreadable file is a SettingError naming ``setting``."""
    try:
        return Path(path).read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingError(f"{setting}={path!r}: cannot be read ({exc})") from None


def _jaas_quote(value: str) -> str:
    """Return ``value`` as a double-quoted JAAS option value (JAAS quotes like JSON)."""
    return json.dumps(value, ensure_ascii=False)


def resolve_kafka(kafka: KafkaSettings | str | None = None) -> KafkaSettings:
    """Return ``kafka`` as settings: given ones as they are, else read from the environment.

    Operator commands and library functions take either full settings or just bootstrap
    servers (``--bootstrap-servers``); with a string, security and ``client.id`` still come
    from ``HEADWATER_KAFKA_*``, so no client connects around the one configuration.
    """
    if isinstance(kafka, KafkaSettings):
        return kafka
    settings = KafkaSettings.from_env()
    return replace(settings, bootstrap_servers=kafka) if kafka else settings
