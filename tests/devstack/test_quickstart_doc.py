"""docs/quickstart.md, followed as a reader would: its shell blocks in order, in a fresh folder.

Every ``sh`` block of the page runs with bash, in the page's order, in a folder that plays
the fresh clone (``.venv`` and ``examples`` linked from this checkout: installing is what
``make install`` does, and the packaging tests cover it). Two terminals as on the page: the
first runs ``make run``, ``up``, the printed ``buf curl``, the subscriber, the metrics and
``down``; the second ``watch``. What the page says the reader will see is checked against
what they see.

Changed from the page, and nothing else:
- the clone line is skipped (this folder is the clone);
- ``make run`` runs as ``make -n`` shows it expands, with a short ``--duration``;
- the default ports are replaced by free ones everywhere (a developer's own stack may hold
  9092 and 50051), by flags on ``up`` and in the addresses of later commands.

This is the issue-24 sequence: ``make run`` and then ``up`` in the same folder must work
(a run's checkpoint must not be reused against ``up``'s broker).
"""

from __future__ import annotations

import json
import os
import queue
import re
import shlex
import signal
import sqlite3
import subprocess
import threading
import time
from pathlib import Path

import pytest

from headwater_dev.devstack.cli import DEFAULT_PORTS
from headwater_dev.devstack.ports import free_port
from headwater_dev.devstack.processes import last_commit
from tests.support.launch import launch

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "quickstart.md"
RUN_SECONDS = 10
#: Spark starts twice (run, then up) on a busy 2-core machine.
UP_WITHIN_S = 420
#: What make would run, installing nothing (the stamps are taken as up to date).
MAKE_N = [
    "make",
    "-n",
    "--no-print-directory",
    "-o",
    ".venv/.installed-stamp",
    "-o",
    ".venv/jvm/.installed-stamp",
]
#: Under ``make test`` (CI) the outer make's variables would make this one a sub-make.
_OUTER_MAKE = ("MAKELEVEL", "MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES")

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(1200)]


def blocks(text: str, lang: str) -> list[str]:
    """The fenced blocks of ``lang`` ("" for blocks without one), in page order."""
    return [
        m.group(2) for m in re.finditer(r"```(\w*)\n(.*?)```", text, re.S) if m.group(1) == lang
    ]


def bash(script: str, cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-eo", "pipefail", "-c", script],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
        env=_reader_env(),
    )


def _reader_env() -> dict[str, str]:
    """A reader's shell: no virtualenv active until a block sources it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEADWATER_")}
    env.pop("VIRTUAL_ENV", None)
    venv_bin = str(ROOT / ".venv" / "bin")
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if p != venv_bin)
    return env


def one_line(command: str) -> str:
    """A shell command with its backslash line continuations joined."""
    return re.sub(r"\\\n\s*", " ", command).strip()


@pytest.fixture
def reader(tmp_path: Path):
    """The fresh clone's folder; whatever stack the test left running is stopped."""
    folder = tmp_path / "headwater"
    folder.mkdir()
    (folder / ".venv").symlink_to(ROOT / ".venv")
    (folder / "examples").symlink_to(ROOT / "examples")
    yield folder
    if (folder / ".devstack" / "state.json").exists():
        bash(".venv/bin/headwater devstack down --timeout 60", folder, timeout=120)


def test_quickstart_as_written(reader: Path):
    page = PAGE.read_text()
    sh = blocks(page, "sh")
    shown = blocks(page, "")
    make_run, up, watch, buf_curl, subscriber, metrics, down = sh
    ports = {name: free_port() for name in DEFAULT_PORTS}

    def local(command: str) -> str:
        """The page's command with this test's ports in place of the defaults."""
        for name, default in DEFAULT_PORTS.items():
            command = command.replace(f"127.0.0.1:{default}", f"127.0.0.1:{ports[name]}")
        return command

    # 1. make run: what make runs, with a short duration. The rows the page promises.
    assert make_run.splitlines()[-1] == "make run"
    expanded = subprocess.run(
        [*MAKE_N, "run", f"ARGS=--duration {RUN_SECONDS}"],
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if k not in _OUTER_MAKE},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert expanded == f".venv/bin/headwater devstack run --duration {RUN_SECONDS}"
    ran = bash(expanded, reader, timeout=600)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    for row in shown[0].strip().splitlines():
        label = row.removeprefix("guarantees").strip().rsplit(None, 2)[0]
        assert re.search(rf"{re.escape(label)}\s+0\s+PASS", ran.stdout), (label, ran.stdout)
    # The run's checkpoint went with its broker: nothing for `up` to trip over.
    assert not list(reader.glob(".devstack/**/commits")), "a run left a checkpoint behind"

    # 2. up, in the same folder, after the run: up means the enricher ran a micro-batch.
    assert up.strip().splitlines() == ["source .venv/bin/activate", "headwater devstack up"]
    flags = " ".join(f"--{n.replace('_', '-')}-port {p}" for n, p in ports.items())
    terminal_1 = "source .venv/bin/activate\n"
    started = bash(f"{terminal_1}headwater devstack up {flags}", reader, timeout=UP_WITHIN_S)
    assert started.returncode == 0, started.stdout[-3000:] + _log(reader, "enricher.log")
    assert list((reader / ".devstack" / "checkpoint" / "commits").iterdir())
    printed = started.stdout
    expected = shown[1].strip().splitlines()
    assert re.search(r"^Headwater dev stack is up \(supervisor pid \d+\)$", printed, re.M)
    for row in expected[1:]:
        if row.strip():
            label = row.strip().split("  ")[0]
            assert re.search(rf"^  {re.escape(label)}\s+\S", printed, re.M), (label, printed)
    assert f"127.0.0.1:{ports['grpc']}  (plaintext; server reflection on)" in printed

    # 3. watch in a second terminal, then the buf curl call up printed, pasted.
    watcher = launch(  # its own process group, as a terminal's: Ctrl-C reaches all of it
        ["bash", "-c", local(watch)],
        cwd=reader,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_reader_env(),
    )
    try:
        assert watcher.stderr is not None
        for _ in range(50):  # until "watching ... from their end": it prints from then on
            ready = watcher.stderr.readline()
            if "from their end" in ready or not ready:
                break
        assert "from their end" in ready, ready
        pasted = _printed_buf_curl(printed)
        assert _normalized(pasted) == _normalized(local(one_line(buf_curl))), pasted
        answer = bash(f"{terminal_1}{pasted}", reader, timeout=60)
        assert answer.returncode == 0, answer.stderr
        (result,) = json.loads(answer.stdout)["results"]
        (promised,) = json.loads(blocks(page, "json")[0])["results"]
        assert result.keys() == promised.keys()
        assert (result["messageId"], result["code"], result["error"]) == ("quickstart-1", 0, None)

        lines = _watch_lines(watcher, want={"events.telemetry.v1", "completions.v1"}, within_s=180)
    finally:
        if watcher.poll() is None:
            os.killpg(watcher.pid, signal.SIGINT)  # Ctrl-C
        watcher.wait(30)
    assert watcher.returncode == 0
    event_line, completion_line = shown[2].strip().splitlines()
    for fragment in (
        '"topic": "events.telemetry.v1"',
        '"key": "demo-001"',
        '"messageId": "quickstart-1"',
        '"site": "plant-dev"',
        '{"name": "temperature", "value": 21.5, "unit": "celsius"}',
        '{"name": "humidity", "value": 40.0, "unit": "percent"}',
    ):
        assert fragment in event_line and fragment in lines["events.telemetry.v1"], fragment
    for fragment in (
        '"topic": "completions.v1"',
        '"messageId": "quickstart-1"',
        '"outcome": "OUTCOME_ENRICHED"',
        '"topic": "events.telemetry.v1"}]',
    ):
        assert fragment in completion_line and fragment in lines["completions.v1"], fragment

    # The subscriber example counts the completion; Ctrl-C makes it print its counts.
    counter = launch(
        ["bash", "-c", f"{terminal_1}{local(one_line(subscriber))}"],
        cwd=reader,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_reader_env(),
    )
    try:
        _wait_counted(reader / "counts.db", ("demo-001", "ENRICHED"), counter, within_s=60)
    finally:
        if counter.poll() is None:
            os.killpg(counter.pid, signal.SIGINT)  # Ctrl-C, as the page says
        out, err = counter.communicate(timeout=60)
    assert counter.returncode == 0, err[-3000:]
    assert json.loads(out.strip().splitlines()[-1])

    # 4. The metrics the page greps for.
    scraped = bash(f"{terminal_1}{local(metrics)}", reader, timeout=60)
    assert scraped.returncode == 0, scraped.stderr
    assert re.search(
        r'^headwater_ingest_messages_total\{.*code="OK".*\} [1-9]', scraped.stdout, re.M
    )
    assert re.search(r"^headwater_enricher_input_records_total\b", scraped.stdout, re.M)
    assert re.search(r"^headwater_enricher_consumer_lag_records\b", scraped.stdout, re.M)

    # 5. down, in the first terminal.
    stopped = bash(f"{terminal_1}{down}", reader, timeout=200)
    assert stopped.returncode == 0 and "stopped" in stopped.stdout, stopped.stdout

    # "A later `up` continues where you left off": the same checkpoint, and up waits for a
    # micro-batch of the new enricher (the old commits on disk do not count).
    checkpoint = reader / ".devstack" / "checkpoint"
    before = last_commit(checkpoint)
    again = bash(f"{terminal_1}headwater devstack up {flags}", reader, timeout=UP_WITHIN_S)
    assert again.returncode == 0, again.stdout[-3000:] + _log(reader, "enricher.log")
    assert last_commit(checkpoint) > before
    assert f"checkpoint {checkpoint.resolve()}: reused" in _log(reader, "supervisor.log")
    stopped = bash(f"{terminal_1}{down}", reader, timeout=200)
    assert stopped.returncode == 0, stopped.stdout


def _printed_buf_curl(printed: str) -> str:
    """The ``buf curl`` command ``up`` printed, as a reader copies it (one line)."""
    start = printed.index("Publish a message")
    command = printed[start:].split("\n\n")[1]
    return one_line(command)


def _normalized(command: str) -> list[str]:
    """A buf curl command without what differs per stack: token, time, buf's folder."""
    args = shlex.split(command)
    args[0] = Path(args[0]).name
    out = []
    for arg in args:
        arg = re.sub(r"Bearer \S+", "Bearer TOKEN", arg)
        arg = re.sub(r'"deviceTime":"[^"]+"', '"deviceTime":"TIME"', arg)
        out.append(arg)
    return out


def _watch_lines(watcher: subprocess.Popen[str], want: set[str], within_s: float) -> dict[str, str]:
    """The first line the watch printed about quickstart-1 for each topic in ``want``."""
    assert watcher.stdout is not None
    lines: queue.Queue[str] = queue.Queue()
    # A thread reads: a pipe's readline has no timeout, and the bound must hold.
    threading.Thread(target=lambda: [lines.put(x) for x in watcher.stdout], daemon=True).start()
    found: dict[str, str] = {}
    deadline = time.monotonic() + within_s
    while set(found) != want:
        left = deadline - time.monotonic()
        assert left > 0, f"watch printed only {sorted(found)}"
        try:
            line = lines.get(timeout=left)
        except queue.Empty:
            continue
        topic = json.loads(line)["topic"]
        if topic in want and '"quickstart-1"' in line:
            found.setdefault(topic, line.strip())
    return found


def _wait_counted(
    db: Path, row: tuple[str, str], proc: subprocess.Popen[str], within_s: float
) -> None:
    deadline = time.monotonic() + within_s
    while True:
        if proc.poll() is not None:
            pytest.fail(f"the subscriber example exited early: {proc.communicate()[1][-3000:]}")
        if db.exists():
            with sqlite3.connect(db) as conn:
                try:
                    got = conn.execute(
                        "SELECT n FROM counts WHERE device_id = ? AND outcome = ?", row
                    ).fetchall()
                except sqlite3.OperationalError:  # the table is not there yet
                    got = []
            if got:
                return
        assert time.monotonic() < deadline, f"no count of {row} within {within_s}s"
        time.sleep(1)


def _log(reader: Path, name: str) -> str:
    path = reader / ".devstack" / name
    return path.read_text()[-5000:] if path.exists() else ""
