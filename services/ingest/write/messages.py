"""One device message's checks, each made once, where the message is first parsed.

A message is written only if it parses as a ``DeviceMessage``, keeps the contract's field
rules and the server's limits (``validation.py``), and names a device its gateway is bound
to (the gateway's ``devices`` in the tokens file). Each failure is that message's result
alone: the others of its request are still written.
"""

from __future__ import annotations

from google.protobuf.message import DecodeError

from headwater.ingest.admission.auth import Gateway
from headwater.ingest.errors import InvalidMessageError, PermissionDeniedError
from headwater.ingest.status import error_result
from headwater.ingest.write.validation import DeviceMessageValidator
from headwater.proto.device.v1 import device_message_pb2
from headwater.proto.ingest.v1 import ingest_messages_pb2 as api


class MessageChecks:
    """The checks of every message a gateway sends, under the server's payload limit."""

    def __init__(self, max_payload_bytes: int) -> None:
        self._validator = DeviceMessageValidator(max_payload_bytes)

    def check(
        self, raw: bytes, gateway: Gateway
    ) -> tuple[device_message_pb2.DeviceMessage, api.MessageResult | None]:
        """Parse and check one message; return it and its rejection result, if any."""
        try:
            msg = device_message_pb2.DeviceMessage.FromString(raw)
        except DecodeError:
            err = InvalidMessageError(
                "message is not a valid headwater.device.v1.DeviceMessage",
                reason="MALFORMED_MESSAGE",
            )
            return device_message_pb2.DeviceMessage(), error_result("", err)
        violations = self._validator.violations(msg)
        if violations:
            only_payload = all(f == "payload" for f, _ in violations) and msg.payload
            invalid = InvalidMessageError(
                "; ".join(f"{f} {d}" for f, d in violations),
                reason="PAYLOAD_TOO_LARGE" if only_payload else "INVALID_MESSAGE",
                field_violations=violations,
            )
            return msg, error_result(msg.message_id, invalid)
        if not gateway.may_speak_for(msg.device_id):
            denied = PermissionDeniedError(
                f"gateway {gateway.gateway_id!r} (tenant {gateway.tenant!r}) is not bound to "
                f"device {msg.device_id!r}; add the device to its 'devices' in the tokens file",
                field_violations=[("device_id", "not bound to the calling gateway")],
            )
            return msg, error_result(msg.message_id, denied)
        return msg, None


def message_id_of(raw: bytes) -> str:
    """The message id of a raw device message, or "" when it cannot be parsed."""
    try:
        return device_message_pb2.DeviceMessage.FromString(raw).message_id
    except DecodeError:
        return ""
