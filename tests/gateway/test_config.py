"""The gateway's settings: checked when built, read from the environment, secrets hidden."""

from __future__ import annotations

import json

import pytest

from headwater.gateway.channel import SERVICE_CONFIG, channel_options
from headwater.gateway.config import GatewayConfig, TlsConfig
from headwater.runtime.env import SettingError


def test_secrets_never_show_in_repr() -> None:
    config = GatewayConfig(
        "dns:///ingest:50051",
        token="s3cret-token",
        tls=TlsConfig(client_certificate_chain=b"CERT", client_private_key=b"PRIVATE-KEY"),
    )
    assert "s3cret-token" not in repr(config) and "PRIVATE-KEY" not in repr(config)


def test_from_env_reads_target_token_and_tls_files(tmp_path) -> None:
    (tmp_path / "ca.crt").write_bytes(b"CA")
    env = {
        "HEADWATER_GATEWAY_TARGET": "dns:///ingest.example.com:50051",
        "HEADWATER_GATEWAY_TOKEN": "t",
        "HEADWATER_GATEWAY_TLS_CA_FILE": str(tmp_path / "ca.crt"),
        "HEADWATER_GATEWAY_USE_STREAM": "false",
        "HEADWATER_GATEWAY_FRAME_MESSAGES": "200",
    }
    config = GatewayConfig.from_env(env)
    assert (config.target, config.token, config.use_stream, config.frame_messages) == (
        "dns:///ingest.example.com:50051",
        "t",
        False,
        200,
    )
    assert config.tls == TlsConfig(root_certificates=b"CA")
    assert GatewayConfig.from_env({"HEADWATER_GATEWAY_TARGET": "h:1"}).tls is None
    with pytest.raises(SettingError, match="HEADWATER_GATEWAY_TARGET"):
        GatewayConfig.from_env({})


@pytest.mark.parametrize(
    "kw",
    [{"frame_messages": 0}, {"frame_messages": 501}, {"window_frames": 0}, {"call_timeout_s": 0}],
)
def test_settings_that_cannot_work_are_refused(kw) -> None:
    with pytest.raises(ValueError):
        GatewayConfig("h:1", **kw)


def test_mtls_needs_certificate_and_key_together() -> None:
    with pytest.raises(ValueError, match="both"):
        TlsConfig(client_certificate_chain=b"CERT")


def test_round_robin_comes_from_the_service_config() -> None:
    options = dict(channel_options(GatewayConfig("dns:///ingest:50051")))
    assert json.loads(options["grpc.service_config"]) == json.loads(SERVICE_CONFIG)
    assert json.loads(SERVICE_CONFIG)["loadBalancingConfig"] == [{"round_robin": {}}]
