"""Check a group's committed offsets before it joins the group.

A subscriber that cannot start then fails without joining: a crash-looping replica would
otherwise make the group rebalance at every restart, and the error comes without waiting
for a join. The check is a courtesy, not the guarantee: between it and the join another
member may commit or the log may move, so the subscriber checks again while it consumes.
"""

from __future__ import annotations

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from headwater.kafka.settings import KafkaSettings
from headwater.subscriber.errors import StartPointRequiredError
from headwater.subscriber.settings import SubscriberSettings


async def check_start_points(kafka: KafkaSettings, settings: SubscriberSettings) -> None:
    """Raise StartPointRequiredError for a partition that has no usable committed offset.

    A partition without one is fine when ``settings.start`` is given (a first run); an
    offset below the log start (deleted by retention) is never fine. An offset past the
    log end is found after the join, from the high watermark of a fetch: the embedded dev
    broker under-reports the log end asked for directly.
    """
    client = kafka.aiokafka_config(f"headwater-subscriber-{settings.group_id}")
    tps = await _partitions(client, settings.topics)
    if not tps:
        return  # topics not there yet: the consumer waits for them
    probe = AIOKafkaConsumer(
        group_id=settings.group_id,  # to read its offsets; it never joins (no subscribe)
        enable_auto_commit=False,
        **client,
    )
    await probe.start()
    try:
        starts = await probe.beginning_offsets(tps)
        for tp in tps:
            committed = await probe.committed(tp)
            if committed is None:
                if settings.start is None:
                    raise StartPointRequiredError(
                        settings.group_id, tp.topic, tp.partition, "no committed offset"
                    )
            elif committed < starts[tp]:
                raise StartPointRequiredError(
                    settings.group_id,
                    tp.topic,
                    tp.partition,
                    f"the committed offset {committed} is before the log start {starts[tp]}; "
                    "the records in between were deleted (retention) and are lost to "
                    "this group",
                )
    finally:
        await probe.stop()


async def _partitions(client: dict[str, object], topics: tuple[str, ...]) -> list[TopicPartition]:
    """The partitions of ``topics`` that exist now.

    Asked of an admin client: a consumer's ``topics()`` fetches metadata without keeping
    it, so its ``partitions_for_topic`` stays empty until it subscribes (this check found
    no partition, and never ran, until it asked here).
    """
    admin = AIOKafkaAdminClient(**client)
    await admin.start()
    try:
        described = await admin.describe_topics(list(topics))
    finally:
        await admin.close()
    return [
        TopicPartition(topic["topic"], p["partition"])
        for topic in described
        if topic["error_code"] == 0
        for p in sorted(topic["partitions"], key=lambda p: p["partition"])
    ]
