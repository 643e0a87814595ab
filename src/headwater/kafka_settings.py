"""How every Headwater process connects to Kafka (``HEADWATER_KAFKA_*``)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from headwater.settings_env import SettingError, env_bool, env_int, env_str


@dataclass(frozen=True)
class KafkaSettings:
    """Connection and producer settings shared by the services."""

    bootstrap_servers: str = "127.0.0.1:9092"
    #: Idempotent producer; on for real Kafka. Only the embedded dev broker needs it off.
    enable_idempotence: bool = True
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
            enable_idempotence=env_bool(env, "HEADWATER_KAFKA_ENABLE_IDEMPOTENCE", True),
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
