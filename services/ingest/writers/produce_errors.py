"""Produce errors in the ingest service's own terms, whatever Kafka client raised them.

Each writer (``confluent_writer.py``, ``aiokafka_writer.py``) maps its client's errors to a
:class:`ProduceError` of one :class:`Kind`; the service's ``status.py`` maps only these kinds
to gRPC codes and reasons, so it depends on no Kafka client and a new writer needs no change
there.
"""

from __future__ import annotations

import enum

from headwater.errors import HeadwaterError


class Kind(enum.Enum):
    """What a failed produce means for the caller."""

    #: The cluster cannot take the record now (broker down, leader moving, queue full, the
    #: producer being replaced): a resend later will be written.
    RETRIABLE = "retriable"
    #: No acknowledgement in time: the record may or may not be stored.
    TIMEOUT = "timeout"
    #: The broker refuses the record's size: resending the same bytes never works.
    TOO_LARGE = "too_large"
    #: The service may not write the topic: an operator must grant access.
    AUTH = "auth"
    #: Anything else the client reports (a bug or an unknown broker error).
    OTHER = "other"


class ProduceError(HeadwaterError):
    """A record was not written; ``kind`` says why, ``client_error`` names the client's error.

    Args:
        kind: what the failure means for the caller.
        message: the client's description.
        client_error: the client's own error name (e.g. ``MSG_SIZE_TOO_LARGE``), passed on
            to the gateway as ``kafka_error`` for diagnosis.
    """

    def __init__(self, kind: Kind, message: str, client_error: str = "") -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.client_error = client_error

    @property
    def retriable(self) -> bool:  # type: ignore[override]
        """Sending the same record again later may succeed."""
        return self.kind in (Kind.RETRIABLE, Kind.TIMEOUT)
