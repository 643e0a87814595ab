"""One message's checks (write/messages.py), each provoked: parse, rules, device binding."""

from __future__ import annotations

import grpc

from headwater.ingest.admission.auth import Gateway
from headwater.ingest.write.messages import MessageChecks, message_id_of
from tests.support.ingest import device_message

ACME = Gateway("gw-a", "acme", ("acme-*",))
CHECKS = MessageChecks(max_payload_bytes=1024)
INVALID = grpc.StatusCode.INVALID_ARGUMENT.value[0]


def test_a_valid_message_of_a_bound_device_passes():
    sent = device_message("acme-001")
    msg, rejection = CHECKS.check(sent.SerializeToString(), ACME)
    assert rejection is None
    assert msg == sent


def test_bytes_that_are_no_device_message_are_malformed():
    msg, rejection = CHECKS.check(b"\xff\xff\xff", ACME)
    assert msg.message_id == ""
    assert rejection is not None
    assert (rejection.code, rejection.error.reason) == (INVALID, "MALFORMED_MESSAGE")
    assert rejection.message_id == ""


def test_a_message_breaking_the_rules_is_invalid_with_its_fields():
    sent = device_message("acme-001", message_id="")
    _, rejection = CHECKS.check(sent.SerializeToString(), ACME)
    assert rejection is not None
    assert (rejection.code, rejection.error.reason) == (INVALID, "INVALID_MESSAGE")
    assert [v.field for v in rejection.error.field_violations] == ["message_id"]


def test_a_payload_over_the_server_limit_is_too_large():
    sent = device_message("acme-001", payload=b"x" * 1025)
    _, rejection = CHECKS.check(sent.SerializeToString(), ACME)
    assert rejection is not None
    assert rejection.error.reason == "PAYLOAD_TOO_LARGE"
    assert rejection.message_id == sent.message_id


def test_a_device_the_gateway_is_not_bound_to_is_denied():
    sent = device_message("globex-9")
    _, rejection = CHECKS.check(sent.SerializeToString(), ACME)
    assert rejection is not None
    assert rejection.code == grpc.StatusCode.PERMISSION_DENIED.value[0]
    assert rejection.error.reason == "DEVICE_NOT_PERMITTED"
    assert "not bound to device 'globex-9'" in rejection.error.message
    assert [v.field for v in rejection.error.field_violations] == ["device_id"]


def test_the_binding_is_checked_only_on_a_message_that_keeps_the_rules():
    """One result per message, from its first failed check: an invalid foreign one is invalid."""
    sent = device_message("globex-9", message_id="")
    _, rejection = CHECKS.check(sent.SerializeToString(), ACME)
    assert rejection is not None and rejection.error.reason == "INVALID_MESSAGE"


def test_message_id_of_reads_the_id_or_gives_empty():
    sent = device_message()
    assert message_id_of(sent.SerializeToString()) == sent.message_id
    assert message_id_of(b"\xff\xff\xff") == ""
