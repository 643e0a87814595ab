"""How every Headwater process connects to Kafka (``HEADWATER_KAFKA_*``)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from headwater.settings_env import SettingError, env_int, env_str


@dataclass(frozen=True)
class KafkaSettings:
    """Connection and producer settings shared by the services."""

    bootstrap_servers: str = "127.0.0.1:9092"
    linger_ms: int = 5
    compression_type: str = "none"
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str = ""
    sasl_username: str = ""
    sasl_password: str = field(default="", repr=False)  # a secret: never printed
    ssl_cafile: str = ""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> KafkaSettings:
        """Read the settings from ``HEADWATER_KAFKA_*`` environment variables."""
        env = os.environ if env is None else env
        compression = env_str(env, "HEADWATER_KAFKA_COMPRESSION_TYPE", "none")
        if compression not in ("none", "gzip", "snappy", "lz4", "zstd"):
            raise SettingError(
                f"HEADWATER_KAFKA_COMPRESSION_TYPE={compression!r}: use none, gzip, snappy, "
                "lz4 or zstd"
            )
        return cls(
            bootstrap_servers=env_str(env, "HEADWATER_KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092"),
            linger_ms=env_int(env, "HEADWATER_KAFKA_LINGER_MS", 5),
            compression_type=compression,
            security_protocol=env_str(env, "HEADWATER_KAFKA_SECURITY_PROTOCOL", "PLAINTEXT"),
            sasl_mechanism=env_str(env, "HEADWATER_KAFKA_SASL_MECHANISM", ""),
            sasl_username=env_str(env, "HEADWATER_KAFKA_SASL_USERNAME", ""),
            sasl_password=env_str(env, "HEADWATER_KAFKA_SASL_PASSWORD", ""),
            ssl_cafile=env_str(env, "HEADWATER_KAFKA_SSL_CAFILE", ""),
        )

    def aiokafka_security(self) -> dict[str, Any]:
        """Return the aiokafka keyword arguments for security, empty for plaintext."""
        kwargs: dict[str, Any] = {"security_protocol": self.security_protocol}
        if self.sasl_mechanism:
            kwargs |= {
                "sasl_mechanism": self.sasl_mechanism,
                "sasl_plain_username": self.sasl_username,
                "sasl_plain_password": self.sasl_password,
            }
        if self.security_protocol in ("SSL", "SASL_SSL"):
            from aiokafka.helpers import create_ssl_context

            kwargs["ssl_context"] = create_ssl_context(cafile=self.ssl_cafile or None)
        return kwargs

    def java_config(self) -> dict[str, str]:
        """Return the Java client properties for connection and security (Spark's connector)."""
        conf = {
            "bootstrap.servers": self.bootstrap_servers,
            "security.protocol": self.security_protocol,
        }
        if self.sasl_mechanism:
            module = (
                "org.apache.kafka.common.security.plain.PlainLoginModule"
                if self.sasl_mechanism == "PLAIN"
                else "org.apache.kafka.common.security.scram.ScramLoginModule"
            )
            user, password = (_jaas_quote(v) for v in (self.sasl_username, self.sasl_password))
            conf["sasl.mechanism"] = self.sasl_mechanism
            conf["sasl.jaas.config"] = f"{module} required username={user} password={password};"
        if self.ssl_cafile:
            # PEM trust stores need no keytool step (Java client 2.7+).
            conf["ssl.truststore.type"] = "PEM"
            conf["ssl.truststore.location"] = self.ssl_cafile
        return conf

    def confluent_config(self) -> dict[str, Any]:
        """Return the librdkafka configuration for connection and security."""
        conf: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap_servers,
            "security.protocol": self.security_protocol.lower(),
        }
        if self.sasl_mechanism:
            conf |= {
                "sasl.mechanism": self.sasl_mechanism,
                "sasl.username": self.sasl_username,
                "sasl.password": self.sasl_password,
            }
        if self.ssl_cafile:
            conf["ssl.ca.location"] = self.ssl_cafile
        return conf


def _jaas_quote(value: str) -> str:
    """Return ``value`` as a double-quoted JAAS option value (JAAS quotes like JSON)."""
    return json.dumps(value, ensure_ascii=False)
