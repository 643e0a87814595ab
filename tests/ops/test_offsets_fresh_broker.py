"""Offsets on a broker that has just started: a clear answer, never a crashed process.

The first group request after a broker starts finds its group coordinator still loading.
librdkafka 2.16 crashes the process (SIGSEGV) when ListConsumerGroupOffsets meets that
answer (it did in 4 of 4 runs before ``offsets._await_coordinator``), so the command runs in
its own process here: a crash shows as a negative return code, not as a dead test run.
"""

from __future__ import annotations

import os
import subprocess
import sys

from headwater_dev.devstack.broker import EmbeddedBroker


def test_offsets_show_right_after_the_broker_starts_answers_instead_of_crashing() -> None:
    with EmbeddedBroker() as broker:
        env = {**os.environ, "HEADWATER_KAFKA_BOOTSTRAP_SERVERS": broker.bootstrap_servers}
        done = subprocess.run(
            [sys.executable, "-m", "headwater.cli", "offsets", "show", "--group", "never-seen"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    # A group that never committed shows no partitions (and says so), not an error.
    assert "Traceback" not in done.stderr
