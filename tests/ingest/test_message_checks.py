"""One message's checks (write/messages.py), each provoked: parse, rules, device binding."""

from __future__ import annotations

import fnmatch

import grpc
from hypothesis import given, settings
from hypothesis import strategies as st

from headwater.ingest.admission.auth import Gateway
from headwater.ingest.write.messages import MessageChecks, message_id_of
from headwater.ingest.write.validation import DeviceMessageValidator
from headwater.proto.device.v1 import device_message_pb2
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


def test_a_gateways_binding_is_fnmatch_of_its_patterns():
    """``may_speak_for`` (one compiled expression) says what fnmatch says of each pattern."""
    ids = ["acme-1", "acme-", "globex-2", "abc", "x9", "", "a\nb", "acme-\n", "[abc]", "a"]
    for patterns in [("acme-*",), ("*",), ("a?c", "x[0-9]*"), ("",), (), ("[!a]*", "[abc]")]:
        gateway = Gateway("gw", "t", patterns)
        for device in ids:
            expected = any(fnmatch.fnmatchcase(device, p) for p in patterns)
            assert gateway.may_speak_for(device) == expected, (patterns, device)


def test_message_id_of_reads_the_id_or_gives_empty():
    sent = device_message()
    assert message_id_of(sent.SerializeToString()) == sent.message_id
    assert message_id_of(b"\xff\xff\xff") == ""


# The validator's one-pass check for the common message (issue 40) against the full checks:
# each field drawn from values that keep or break its rules, at and around their limits.
_IDS = st.sampled_from(["", "a", "acme-001", "x" * 64, "x" * 65, "x" * 128, "x" * 129, "a b", "é"])
_TYPES = st.sampled_from(["", "text/csv", " x", "x y", "x" * 128, "x" * 129, "a\x7f"])
_ATTRIBUTES = st.dictionaries(
    st.sampled_from(["", "k", "k" * 65]), st.sampled_from(["", "v" * 257]), max_size=2
)


@st.composite
def _messages(draw: st.DrawFn) -> device_message_pb2.DeviceMessage:
    msg = device_message_pb2.DeviceMessage(
        message_id=draw(_IDS),
        device_id=draw(_IDS),
        content_type=draw(_TYPES),
        payload=b"p" * draw(st.sampled_from([0, 1, 1024, 1025])),
        sequence=draw(st.sampled_from([0, 1, 2**63 - 1, 2**63, 2**64 - 1])),
        attributes=draw(_ATTRIBUTES),
    )
    if draw(st.booleans()):
        msg.device_time.seconds = draw(st.sampled_from([-1, 0, 253402300799, 253402300800]))
        msg.device_time.nanos = draw(st.sampled_from([-1, 0, 999_999_999, 1_000_000_000]))
    return msg


@settings(max_examples=500, deadline=None)
@given(_messages())
def test_the_one_pass_check_agrees_with_the_full_checks(msg: device_message_pb2.DeviceMessage):
    """Shown valid by the one pass only if the full checks find nothing; exact without maps."""
    validator = DeviceMessageValidator(max_payload_bytes=1024)
    full = validator._all_violations(msg)
    if msg.attributes:  # map entries always go the full way
        assert not validator._plainly_valid(msg)
    else:
        assert validator._plainly_valid(msg) == (full == [])
    assert validator.violations(msg) == full
