"""Lines on the enricher's stderr become JSON (the end-to-end check is in test_failures)."""

from __future__ import annotations

import json

from headwater.enricher.driver.stderr_json import json_line


def test_log4j_lines_keep_their_level_and_logger() -> None:
    line = "26/11/23 11:32:46 WARN MicroBatchExecution: Disabling AQE since AQE is not supported.\n"
    entry = json.loads(json_line(line) or "")
    assert (entry["level"], entry["logger"]) == ("warn", "MicroBatchExecution")
    assert entry["message"] == "Disabling AQE since AQE is not supported."


def test_json_lines_pass_unchanged_and_other_text_is_wrapped() -> None:
    ours = '{"level": "info", "logger": "headwater.enricher.driver.runner", "message": "started"}'
    assert json_line(ours + "\n") == ours
    entry = json.loads(json_line("\tat org.apache.spark.Foo.bar(Foo.scala:1)") or "")
    assert (entry["logger"], entry["message"]) == (
        "spark.stderr",
        "\tat org.apache.spark.Foo.bar(Foo.scala:1)",
    )
    assert json.loads(json_line("{not json") or "")["message"] == "{not json"


def test_pyspark_worker_chatter_and_blank_lines_are_dropped() -> None:
    assert json_line("Starting Streaming TransformWithStateInPandas Python worker.\n") is None
    assert (
        json_line("Streaming TransformWithStateInPandas Python worker Completed execution\n")
        is None
    )
    assert (
        json_line(
            "26/11/23 11:34:09 WARN TransformWithStateInPySparkStateServer: "
            "Value state device doesn't contain a value."
        )
        is None
    )
    assert json_line("\n") is None
