"""The process guard (a pytest plugin): no test leaves a process running.

A test's processes are this pytest process's descendants that were not there when the test
started: what session fixtures started before it (the broker, Spark's JVM) and what those
start later belong to them, not to the test. pytest is made a *child subreaper*, so a
daemon a test starts (``setsid`` and exit, as ``headwater devstack up`` does) stays its
descendant after its parent exits. When a test ends, passed or failed, what it left gets
:data:`GRACE_S` to exit by itself, then is killed with its process group, and the test
fails naming each command line. After the session fixtures are torn down, whatever still
runs is killed the same way and fails the run. The terminal summary prints both counts.

A session fixture that starts processes again during the session (the three-node cluster:
a test kills a node, the fixture starts it again) names them with :func:`session_owns`;
they are the fixture's, whichever test was running when they started.

Processes are found by walking ``/proc`` (Linux; no psutil). Interpreter-wide helpers that
libraries keep for the life of the interpreter (pyspark's gateway JVM and its workers,
multiprocessing's resource tracker and fork server) are never counted.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

#: Time a test's leftovers get to exit by themselves (a process told to stop, not awaited).
GRACE_S = 5.0
#: Time killed processes get to disappear (a SIGKILL is never ignored; this bounds a hang).
KILLED_WITHIN_S = 10.0
_PR_SET_CHILD_SUBREAPER = 36
#: Session fixtures' processes started at any time, each asked when a test ends.
_SESSION_OWNED: list[Callable[[], Iterable[int]]] = []


def session_owns(pids: Callable[[], Iterable[int]]) -> None:
    """Count the processes ``pids()`` returns (asked at each sweep) as a session fixture's."""
    _SESSION_OWNED.append(pids)


@dataclass(frozen=True)
class Proc:
    """One process, as ``/proc/<pid>/stat`` describes it."""

    pid: int
    ppid: int
    pgid: int
    state: str


def processes() -> dict[int, Proc]:
    """Every process on the machine now."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # it exited while we looked
            continue
        # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
        fields = stat[stat.rindex(")") + 2 :].split()
        found[int(entry.name)] = Proc(int(entry.name), int(fields[1]), int(fields[2]), fields[0])
    return found


def descendants(root: int, table: dict[int, Proc]) -> set[int]:
    """The pids below ``root`` in ``table``."""
    children: dict[int, list[int]] = {}
    for proc in table.values():
        children.setdefault(proc.ppid, []).append(proc.pid)
    found: set[int] = set()
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, []))
    return found


def command_line(pid: int) -> str:
    """What ``pid`` runs, as one line ("?" once it is gone)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    return raw.replace(b"\0", b" ").decode(errors="replace").strip() or "?"


def interpreter_helpers() -> set[int]:
    """Pids of the helpers libraries keep for the interpreter's life (never a leak)."""
    pyspark = sys.modules.get("pyspark")
    gateway = getattr(getattr(pyspark, "SparkContext", None), "_gateway", None)
    tracker = sys.modules.get("multiprocessing.resource_tracker")
    forkserver = sys.modules.get("multiprocessing.forkserver")
    pids = [
        getattr(getattr(gateway, "proc", None), "pid", None),
        getattr(getattr(tracker, "_resource_tracker", None), "_pid", None),
        getattr(getattr(forkserver, "_forkserver", None), "_forkserver_pid", None),
    ]
    return {pid for pid in pids if isinstance(pid, int)}


def _owned_elsewhere(pid: int, table: dict[int, Proc], owners: set[int]) -> bool:
    """True if ``pid`` descends from one of ``owners`` (stopping at this process)."""
    me = os.getpid()
    while pid in table and pid != me:
        if pid in owners:
            return True
        pid = table[pid].ppid
    return False


def running_since(baseline: set[int]) -> dict[int, Proc]:
    """Our live descendants that are not in ``baseline``, nor below it or an interpreter helper.

    Zombies among our own children are reaped on the way (they exited; nobody waited).
    """
    table = processes()
    owners = baseline | interpreter_helpers() | {pid for f in _SESSION_OWNED for pid in f()}
    left = {}
    for pid in descendants(os.getpid(), table) - baseline:
        proc = table[pid]
        if _owned_elsewhere(pid, table, owners):
            continue
        if proc.state == "Z":
            if proc.ppid == os.getpid():
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
            continue
        left[pid] = proc
    return left


def _wait_gone(baseline: set[int], within_s: float) -> dict[int, Proc]:
    deadline = time.monotonic() + within_s
    left = running_since(baseline)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = running_since(baseline)
    return left


def sweep(baseline: set[int], grace_s: float = GRACE_S) -> list[str]:
    """Kill what runs beyond ``baseline`` after ``grace_s``; return their command lines."""
    left = _wait_gone(baseline, grace_s)
    if not left:
        return []
    described = [f"pid {pid}: {command_line(pid)}" for pid in sorted(left)]
    # Whole groups go (what a leftover started goes with it), except groups that hold
    # this process or the baseline's: those lose only the leftover itself.
    table = processes()
    protected = {os.getpgrp()} | {table[pid].pgid for pid in baseline if pid in table}
    for proc in left.values():
        with contextlib.suppress(ProcessLookupError):
            if proc.pgid in protected:
                os.kill(proc.pid, signal.SIGKILL)
            else:
                os.killpg(proc.pgid, signal.SIGKILL)
    _wait_gone(baseline, KILLED_WITHIN_S)
    return described


@dataclass
class ProcessGuard:
    """The plugin: counts and kills what each test, and the session, left running."""

    left_by_tests: list[str] = field(default_factory=list)
    left_at_end: list[str] = field(default_factory=list)

    @pytest.fixture(autouse=True)
    def _no_leftover_processes(self, request: pytest.FixtureRequest) -> Iterator[None]:
        baseline = descendants(os.getpid(), processes())
        yield
        left = sweep(baseline)
        if left:
            self.left_by_tests += left
            pytest.fail(
                f"{request.node.nodeid} left {len(left)} process(es) running (killed): "
                + "; ".join(left),
                pytrace=False,
            )

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        # trylast: after the session fixtures' teardown, so the broker is gone by now.
        self.left_at_end = sweep(set())
        if self.left_at_end and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        terminalreporter.write_line(
            f"process guard: {len(self.left_by_tests)} process(es) left running by tests, "
            f"{len(self.left_at_end)} at the end of the session (all killed)"
        )
        for line in self.left_at_end:
            terminalreporter.write_line(f"  left at the end: {line}")


def _become_subreaper() -> None:
    """Adopt orphaned descendants (Linux prctl), so a daemonized process stays ours."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def pytest_configure(config: pytest.Config) -> None:
    _become_subreaper()
    config.pluginmanager.register(ProcessGuard(), "process-guard")
