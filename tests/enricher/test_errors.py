"""The operator's account of a stopped query, from the texts Spark's Kafka source writes."""

from __future__ import annotations

from headwater.enricher.errors import explain_failure

# Excerpts of Spark 4.2's KafkaIllegalStateException texts (failOnDataLoss=true).
DELETED = (
    "Some data may have been lost because they are not available in Kafka any more;\n"
    "Reason: Could not read records in offset [5, 15) for topic partition "
    "t1.ingest.telemetry.v1-0\nwith consumer group spark-kafka-source-x-executor."
)
RECREATED = (
    "Some data may have been lost because they are not available in Kafka any more;\n"
    "Reason: Partition t1.ingest.alarms.v1-3 offset was changed from 6 to 1.\n"
)


def test_deleted_offsets_name_the_partition_the_range_and_the_command() -> None:
    message = explain_failure(DELETED)
    assert message.startswith("offsets 5..14 of t1.ingest.telemetry.v1[0] are no longer in Kafka")
    assert "--topic t1.ingest.telemetry.v1 --partition 0 --log-start" in message


def test_a_recreated_topic_names_the_offset_the_checkpoint_expects() -> None:
    message = explain_failure(RECREATED)
    assert "t1.ingest.alarms.v1[3] to hold offset 6, but the log now ends at 1" in message
    assert "--topic t1.ingest.alarms.v1 --partition 3" in message


def test_other_failures_keep_their_first_part_without_plan_or_stack() -> None:
    text = "[STREAM_FAILED] boom\n=== Streaming Query ===\nplan...\n\tat org.apache.X"
    assert explain_failure(text) == "[STREAM_FAILED] boom"


def test_a_checkpoint_of_another_state_layout_is_explained() -> None:
    from headwater.enricher.errors import explain_failure

    spark = (
        "[STREAM_FAILED] Query [id = 1] terminated with exception: "
        "[STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE] Provided value schema does not match existing "
        "state value schema.\nPlease check number and type of fields.\n=== Streaming Query ==="
    )
    text = explain_failure(spark)
    assert "HEADWATER_ENRICHER_CHECKPOINT_LOCATION" in text
    assert "Upgrading: the state format changed" in text
    assert text.endswith("state value schema.")


def test_a_checkpoint_of_another_stateful_operator_is_explained() -> None:
    """Spark reports the operator's name first when the state metadata already records it."""
    from headwater.enricher.errors import explain_failure

    spark = (
        "[STREAM_FAILED] Query [id = 1] terminated with exception: "
        "[STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA] Streaming stateful operator "
        "name does not match with the operator in state metadata.\n=== Streaming Query ==="
    )
    text = explain_failure(spark)
    assert text.startswith("the checkpoint holds state in another layout"), text
    assert "HEADWATER_ENRICHER_CHECKPOINT_LOCATION" in text
