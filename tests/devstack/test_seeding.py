"""The dev stack's tokens file is one ingest reads: each gateway, its tenant and its devices."""

from __future__ import annotations

from headwater.ingest.admission.auth import hash_token, parse_tokens
from headwater_dev.devstack.seeding import GatewayEntry, tokens_yaml


def test_tokens_yaml_is_read_by_ingest_with_each_gateways_binding() -> None:
    text = tokens_yaml(
        [
            GatewayEntry("gw-1", "acme", "secret-1", ("acme-1-*",)),
            GatewayEntry("dev-gateway", "dev", "secret-2", ("*", "extra-*")),
        ],
        comment="written by a test",
    )
    assert text.startswith("# written by a test\n")
    assert "secret-1" not in text and "secret-2" not in text  # only hashes are written
    gateways = parse_tokens(text)
    first, second = gateways["gw-1"], gateways["dev-gateway"]
    assert first.tenant == "acme" and first.token_sha256 == hash_token("secret-1")
    assert first.may_speak_for("acme-1-007") and not first.may_speak_for("acme-2-001")
    assert second.tenant == "dev" and second.token_sha256 == hash_token("secret-2")
    assert second.may_speak_for("anything")
