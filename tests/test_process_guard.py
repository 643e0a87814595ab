"""The process guard and the launcher: a test that leaves a process fails, and nothing stays.

The guard is proved on a pytest session of its own (a subprocess, as the suite itself
runs): its tests leave processes behind on purpose, in the ways tests leak them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.support import launch, process_guard

ROOT = Path(__file__).resolve().parents[1]

LEAKY_TESTS = """
import os, subprocess, sys

CANARY = {canary!r}
SLEEP = [sys.executable, "-c", "import time; time.sleep(300)", CANARY]


def test_fails_and_leaves_a_child():
    subprocess.Popen(SLEEP)
    assert False, "failing on purpose"


def test_passes_and_leaves_a_daemon():
    # setsid and exit, as `devstack up` starts its supervisor: the daemon is orphaned.
    subprocess.run(
        [sys.executable, "-c",
         "import subprocess, sys; subprocess.Popen(sys.argv[1:], start_new_session=True)",
         *SLEEP],
        check=True,
    )


def test_stops_what_it_started():
    proc = subprocess.Popen(SLEEP)
    proc.terminate()  # not awaited: the guard's grace covers it


def test_starts_nothing():
    pass
"""


def canaries(canary: str) -> list[int]:
    """Pids of processes anywhere whose command line names ``canary``."""
    table = process_guard.processes()
    return [pid for pid in table if canary in process_guard.command_line(pid)]


def test_the_guard_kills_and_reports_what_tests_leave(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
):
    canary = f"guard-canary-{uuid.uuid4().hex}"
    pytester.makepyfile(test_leaky=LEAKY_TESTS.format(canary=canary))
    pytester.makeconftest('pytest_plugins = ["tests.support.process_guard"]')
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the inner session imports tests.support
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=240)

    result.assert_outcomes(passed=3, failed=1, errors=2)
    text = result.stdout.str()
    for test in ("test_fails_and_leaves_a_child", "test_passes_and_leaves_a_daemon"):
        assert f"ERROR at teardown of {test}" in text
        assert f"test_leaky.py::{test} left 1 process(es) running (killed): pid" in text
    assert canary in text  # the command line is named
    assert "failing on purpose" in text  # the test's own failure is still reported
    assert "process guard: 2 process(es) left running by tests, 0 at the end" in text
    assert canaries(canary) == [], "the guard left a canary running"


def test_the_guard_counts_what_outlives_the_session(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
):
    """A process a session fixture leaves is killed at the end and fails the run."""
    canary = f"guard-canary-{uuid.uuid4().hex}"
    pytester.makeconftest(
        f"""
import subprocess, sys
import pytest

pytest_plugins = ["tests.support.process_guard"]


@pytest.fixture(scope="session")
def sleeper():
    yield subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", {canary!r}])
"""
    )
    pytester.makepyfile(test_session="def test_uses_it(sleeper):\n    pass\n")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=240)

    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["process guard: 0 process(es) left running by tests, 1 at the end*", f"*{canary}*"]
    )
    assert canaries(canary) == []


def _sigint_disposition(pid: int) -> str:
    """ "ignored", "caught" or "default": SIGINT's disposition in ``pid`` (/proc status)."""
    status = dict(
        line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    bit = 1 << (signal.SIGINT - 1)
    if int(status["SigIgn"], 16) & bit:
        return "ignored"
    return "caught" if int(status["SigCgt"], 16) & bit else "default"


SLEEPER = [sys.executable, "-c", "import time; time.sleep(300)"]


def test_launch_starts_a_process_group_of_its_own_and_stop_reaps_it():
    with launch.launched(SLEEPER) as proc:
        assert os.getpgid(proc.pid) == proc.pid != os.getpgrp()
    assert proc.returncode == -signal.SIGTERM


def test_launch_as_nohup_leaves_sigint_ignored_in_the_child_only():
    before = signal.getsignal(signal.SIGINT)
    with launch.launched(SLEEPER, ignore_sigint=True) as proc:
        deadline = time.monotonic() + 60
        while _sigint_disposition(proc.pid) != "ignored":  # until exec
            assert time.monotonic() < deadline
            time.sleep(0.05)
    assert signal.getsignal(signal.SIGINT) is before


def test_stop_kills_the_group_when_the_process_ignores_the_signal():
    script = (
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
        "print('ready', flush=True)\n"
        "time.sleep(300)\n"
    )
    proc = launch.launch([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    grandchild = process_guard.descendants(proc.pid, process_guard.processes())
    assert len(grandchild) == 1
    assert launch.stop(proc, signal.SIGTERM, within_s=1) is None  # it ignored SIGTERM
    proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL
    (pid,) = grandchild
    assert _dies_within(pid, 30), f"the grandchild {pid} outlived the group's SIGKILL"


def _dies_within(pid: int, seconds: float) -> bool:
    """Whether ``pid`` is gone or a zombie within ``seconds``.

    A SIGKILL takes effect when the process next runs: on a loaded machine a runnable
    process ("R") may wait a while for a core before it dies.
    """
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False
