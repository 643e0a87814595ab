"""Check a group's committed offsets before it joins the group.

A subscriber that cannot start then fails without joining: a crash-looping replica would
otherwise make the group rebalance at every restart, and the error comes without waiting
for a join. The check is a courtesy, not the guarantee: between it and the join another
member may commit or the log may move, so the subscriber checks again while it consumes.
"""

from __future__ import annotations

from aiokafka import AIOKafkaConsumer, TopicPartition

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
    probe = AIOKafkaConsumer(
        group_id=settings.group_id,  # to read its offsets; it never joins (no subscribe)
        enable_auto_commit=False,
        **kafka.aiokafka_config(f"headwater-subscriber-{settings.group_id}"),
    )
    await probe.start()
    try:
        await probe.topics()  # loads metadata, so partitions_for_topic is known
        tps = [
            TopicPartition(topic, p)
            for topic in settings.topics
            for p in sorted(probe.partitions_for_topic(topic) or ())
        ]
        if not tps:
            return  # topics not there yet: the consumer waits for them
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
