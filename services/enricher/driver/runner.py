"""Run the enricher query in this process until told to stop, and summarize the run."""

from __future__ import annotations

import logging
import os
import tempfile
import time
from collections.abc import Callable
from typing import Any

from headwater.enricher.driver.settings import EnricherSettings
from headwater.enricher.errors import EnricherError, explain_failure
from headwater.runtime.signals import sigint_kept

log = logging.getLogger(__name__)


def run_enricher(
    settings: EnricherSettings,
    should_stop: Callable[[], bool] = lambda: False,
    deadline: float | None = None,
) -> tuple[int, dict[str, Any]]:
    """Run the query; return ``(exit_code, summary)``. Exit code 1 means the query failed.

    Args:
        settings: the enricher settings.
        should_stop: polled twice a second; True stops the query gracefully.
        deadline: a ``time.monotonic()`` value after which the query stops by itself.
    """
    from pyspark.errors import StreamingQueryException

    from headwater.enricher.driver import job
    from headwater.enricher.driver.metrics import EnricherListener
    from headwater.enricher.driver.milestones import StartMilestones
    from headwater.enricher.driver.progress_offsets import from_settings as progress_listener
    from headwater.enricher.state import jvm_state
    from headwater.runtime.telemetry import create_telemetry

    telemetry = create_telemetry("headwater-enricher", prometheus_port=settings.metrics_port)
    stats = os.path.join(tempfile.mkdtemp(prefix="enricher-stats-"), "stats.jsonl")
    code, error = 0, ""
    log_normalizers()
    with sigint_kept():  # the caller's stop path, not pyspark's
        spark = job.build_session(settings)
    log.info("Spark session ready", extra={"master": spark.sparkContext.master})
    milestones = StartMilestones()  # where a restart's time goes, in the log
    spark.streams.addListener(milestones)
    meter = telemetry.meter_provider.get_meter("headwater.enricher")
    listener = EnricherListener(meter, stats, jvm_state.ids_forgotten(spark))
    spark.streams.addListener(listener)
    progress = progress_listener(settings)  # group offsets for `headwater lag`, never read back
    if progress:
        spark.streams.addListener(progress)
    try:
        query = job.start(spark, settings, stats)
        log.info("enricher started", extra={"checkpoint": settings.checkpoint_location})
        while query.isActive and not should_stop():
            if deadline is not None and time.monotonic() >= deadline:
                break
            query.awaitTermination(0.5)
        exc = query.exception()
        if exc is not None:
            raise exc
        query.stop()
    except (StreamingQueryException, EnricherError) as exc:
        code, error = 1, explain_failure(str(exc))
        log.error("enricher stopped with an error", extra={"error": error})
    except Exception as exc:
        if not should_stop():
            raise
        # The signal also reached the JVM (same process group), which stopped Spark
        # first; the checkpoint is consistent, the next run resumes from it.
        log.warning("Spark stopped before the query could", extra={"error": str(exc)[:300]})
    finally:
        listener.read_stats()
        spark.streams.removeListener(listener)
        spark.streams.removeListener(milestones)
        if progress:
            spark.streams.removeListener(progress)
            progress.close()
        telemetry.shutdown()
    summary = listener.summary()
    if error:
        summary["error"] = error
    return code, summary


def log_normalizers() -> None:
    """Log every format the normalizer registry holds, built-in and from entry points."""
    from headwater.enricher.hop.formats.registry import loaded

    formats = loaded()
    log.info(
        "normalizers loaded",
        extra={
            "formats": [f"{f.content_type} ({f.origin})" for f in formats if not f.error],
            "skipped": [f"{f.content_type} ({f.origin}): {f.error}" for f in formats if f.error],
        },
    )
