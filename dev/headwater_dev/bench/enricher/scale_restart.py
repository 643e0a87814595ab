"""The scale benchmark's restart phase: the driver killed as a crash would, then started again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from headwater_dev.bench.enricher import cpu as bench_cpu
from headwater_dev.bench.enricher import traffic
from headwater_dev.bench.enricher.scale_fleet import Fleet, OutOfTime
from headwater_dev.bench.enricher.scale_probes import rss_mib


def restart(fleet: Fleet) -> dict[str, Any]:
    """Kill ``headwater enricher run`` on the fleet's checkpoint, restart it, time the catch-up.

    The driver runs in a process of its own (it must be killed as a crash would); the
    backlog is written while it is down. Caught up: the backlog's last completion seen.
    """
    args = fleet.args
    env = {
        **os.environ,
        "HEADWATER_KAFKA_BOOTSTRAP_SERVERS": fleet.bootstrap,
        "HEADWATER_ENRICHER_TOPIC_PREFIX": fleet.prefix,
        "HEADWATER_ENRICHER_CHECKPOINT_LOCATION": fleet.settings.checkpoint_location,
        "HEADWATER_ENRICHER_SHUFFLE_PARTITIONS": str(args.shuffle_partitions),
        "HEADWATER_ENRICHER_SPARK_MASTER": args.spark_master,
        "HEADWATER_ENRICHER_TRIGGER_INTERVAL_SECONDS": str(args.trigger_seconds),
        "SPARK_LOCAL_DIRS": str(fleet.work / "spark-local-restart"),
        # Its temporary files (the sink's statistics) go with the run's folder too.
        "TMPDIR": str(fleet.work / "tmp-restart"),
    }
    (fleet.work / "tmp-restart").mkdir(exist_ok=True)
    command = [str(Path(sys.executable).with_name("headwater")), "enricher", "run"]
    log = open(fleet.work / "restart.log", "ab")  # noqa: SIM115 (the child's, closed below)

    def launch() -> subprocess.Popen[bytes]:
        return subprocess.Popen(command, env=env, stdout=log, stderr=log, start_new_session=True)

    watch = traffic.CompletionWatch(fleet.bootstrap, fleet.topics.completions, from_end=True)
    watch.start()
    child = launch()
    try:
        # Running and caught up: a second's worth of records comes back complete.
        fleet.backlog(args.rate)
        traffic.wait_for(watch, _Alive(child), args.rate, fleet.clock.left(300))
        os.killpg(child.pid, signal.SIGKILL)  # the driver and its JVM, as a crash
        child.wait(30)
        backlog = args.rate * args.restart_backlog_seconds
        fleet.backlog(backlog)
        before = watch.count
        started = time.perf_counter()
        child = launch()
        first = None
        deadline = time.perf_counter() + fleet.clock.left(600)
        while watch.count < before + backlog and time.perf_counter() < deadline:
            if first is None and watch.count > before:
                first = time.perf_counter() - started
            if child.poll() is not None:
                raise RuntimeError(f"the restarted enricher exited ({child.returncode})")
            time.sleep(0.2)
        caught_up = time.perf_counter() - started
        if watch.count < before + backlog:
            raise OutOfTime("the restarted enricher did not catch up within the time bound")
        jvm = [p for p, (part, _) in bench_cpu.snapshot(child.pid).items() if part == "spark_jvm"]
        return {
            "restart_backlog_messages": backlog,
            "restart_to_first_completion_s": round(first or caught_up, 1),
            "restart_to_caught_up_s": round(caught_up, 1),
            "restart_jvm_peak_rss_mib": rss_mib(jvm[0])["peak_rss_mib"] if jvm else 0.0,
        }
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGTERM)
            try:
                child.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait(30)
        log.close()
        watch.stop_flag = True
        watch.join(10)


class _Alive:
    """A child process in ``traffic.wait_for``'s terms (``isActive``, ``exception``)."""

    def __init__(self, child: subprocess.Popen[bytes]) -> None:
        self.child = child

    @property
    def isActive(self) -> bool:  # pyspark's name
        return self.child.poll() is None

    def exception(self) -> str:
        return f"the enricher exited with {self.child.returncode}"
