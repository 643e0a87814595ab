"""The example in docs/subscribe.md runs as written against the real broker."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from .conftest import completion, produce

pytestmark = pytest.mark.slow
DOC = Path(__file__).parents[2] / "docs" / "subscribe.md"


def test_the_python_example_runs(kafka_bootstrap, topic_factory, tmp_path):
    (block,) = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    topic = topic_factory("completions")
    produce(kafka_bootstrap, topic, [completion(f"m{i}") for i in range(3)])
    result = subprocess.run(
        [sys.executable, "-c", block],
        cwd=tmp_path,
        env=os.environ
        | {
            "HEADWATER_KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
            "HEADWATER_KAFKA_ENABLE_IDEMPOTENCE": "false",  # the embedded broker
            "GROUP": f"g-{uuid.uuid4().hex[:8]}",
            "TOPIC": topic,
            "STOP_AFTER": "3",
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.strip().splitlines()
    assert lines[:3] == [f"m{i} OUTCOME_ENRICHED []" for i in range(3)]
    assert lines[-1] == "{'handled': 3, 'duplicate': 0, 'parked': 0}"
