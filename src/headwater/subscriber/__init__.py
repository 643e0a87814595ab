"""Subscriber client: at-least-once consumption of completion and common-format events.

    from headwater.subscriber import Subscriber, SubscriberSettings, decode_completion

See docs/subscribe.md for the guarantees, the settings and a complete example.
"""

from headwater.subscriber.errors import (
    DeadLetterTopicError,
    StartPointRequiredError,
    SubscriberError,
)
from headwater.subscriber.messages import (
    Decoder,
    Delivery,
    Handler,
    completion_key,
    decode_completion,
    decode_event,
)
from headwater.subscriber.seen import DedupStore, MemoryDedup, SqliteDedup
from headwater.subscriber.settings import SubscriberSettings
from headwater.subscriber.subscriber import Subscriber

__all__ = [
    "DeadLetterTopicError",
    "Decoder",
    "DedupStore",
    "Delivery",
    "Handler",
    "MemoryDedup",
    "SqliteDedup",
    "StartPointRequiredError",
    "Subscriber",
    "SubscriberError",
    "SubscriberSettings",
    "completion_key",
    "decode_completion",
    "decode_event",
]
