"""Under spark-submit (as the Spark Operator and the chart's submitter Job run it) the
enricher's session takes the master spark-submit was given: on Kubernetes that is what
puts the work on executor pods. A session of its own (tests, `headwater enricher run`
alone) runs Spark's local mode."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyspark
import pytest

pytestmark = pytest.mark.spark

PROBE = """
from headwater.enricher.driver.job import build_session
from headwater.enricher.driver.settings import EnricherSettings
spark = build_session(EnricherSettings())
print("MASTER", spark.sparkContext.master, flush=True)
spark.stop()
"""


def test_a_submitted_enricher_keeps_the_master_it_was_given(tmp_path: Path):
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    spark_home = Path(pyspark.__file__).parent
    env = {**os.environ, "SPARK_HOME": str(spark_home), "PYSPARK_PYTHON": sys.executable}
    done = subprocess.run(
        [str(spark_home / "bin" / "spark-submit"), "--master", "local[2]", str(script)],
        capture_output=True, text=True, env=env, timeout=240, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "MASTER local[2]" in done.stdout  # not the local[*] of a session of its own
