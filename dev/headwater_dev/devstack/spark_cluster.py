"""A real Spark standalone cluster on loopback: a master and N workers, to lose executors.

In Spark's local mode the whole job is one JVM: no executor can be lost, no task is retried
elsewhere and the state store never moves to another process. Here the master and each
worker are JVMs of their own, started from the pinned pyspark installation's classes
(``bin/spark-class``), bound to ``127.0.0.1``; each worker offers one core and a bounded
memory to the executors it launches as its child processes. The enricher runs on it as a
driver of its own (``HEADWATER_ENRICHER_SPARK_MASTER=spark://127.0.0.1:<port>``) and ships
its jars to the executors through ``spark.jars``, as :func:`headwater.enricher.driver.job.
build_session` configures them; docs/enricher.md says what differs from Kubernetes.

The suite's executor faults (marker ``cluster``), ``headwater devstack run --spark-workers 2``
and ``headwater chaos kill-executor`` use it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from headwater.errors import HeadwaterError
from headwater.runtime import jvm
from headwater_dev.devstack.ports import free_port

#: The heap of the master and of each worker daemon (Spark's default is 1 GB each): they
#: only keep the cluster's bookkeeping.
DAEMON_MEMORY = "256m"
#: What one worker offers its executors: one executor of :data:`EXECUTOR_MEMORY` fits.
WORKER_MEMORY = "768m"
#: One executor's heap: the keyed state lives off-heap in RocksDB, the Python hop in
#: Python workers beside the JVM.
EXECUTOR_MEMORY = "512m"
START_TIMEOUT_S = 120.0
#: The class in an executor JVM's command line (a worker's child process).
EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
#: In the command line of the master and of every worker (pids are reused: check first).
DAEMON_MARKER = "org.apache.spark.deploy."
_LOG_TAIL_LINES = 20


class SparkClusterError(HeadwaterError, RuntimeError):
    """The standalone cluster did not reach the state asked for in time; says which."""


def spark_home() -> Path:
    """The pinned pyspark installation: its ``jars/`` and ``bin/spark-class``."""
    import pyspark  # late: `headwater --help` must not pay for it

    return Path(pyspark.__file__).parent


def children(pid: int) -> list[int]:
    """The direct child processes of ``pid`` (from ``/proc``; Linux)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            stat = (entry / "stat").read_text()
            # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
            if int(stat[stat.rindex(")") + 2 :].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def command_line(pid: int) -> str:
    """The command line of ``pid``, or "" once it exited."""
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def executors_of(worker_pid: int) -> list[int]:
    """The executor JVMs the worker ``worker_pid`` runs now (its child processes)."""
    return [child for child in children(worker_pid) if EXECUTOR_CLASS in command_line(child)]


class SparkDaemon:
    """One JVM of the cluster (the master or a worker), in a process group of its own.

    The group holds what a worker launches (its executors and their Python workers), so
    :meth:`stop` leaves nothing behind.
    """

    def __init__(self, name: str, main_class: str, args: list[str], log_path: Path) -> None:
        self.name = name
        self._argv = [main_class, *args]
        self.log_path = log_path
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        """The daemon JVM's process id while it runs."""
        return self._proc.pid if self._proc is not None else None

    def start(self, env: dict[str, str]) -> None:
        """Launch the JVM (idempotent); readiness is the cluster's to check."""
        if self._proc is not None:
            return
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            # spark-class execs java in the end: the process is the daemon's JVM.
            self._proc = subprocess.Popen(
                [str(spark_home() / "bin" / "spark-class"), *self._argv],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,  # a Ctrl-C meant for the caller reaches us via stop()
            )

    def exited(self) -> bool:
        """Whether the process was started and has exited on its own."""
        return self._proc is not None and self._proc.poll() is not None

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM the whole process group, SIGKILL what is left after ``timeout``."""
        if self._proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=timeout)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._proc.pid, signal.SIGKILL)  # executors a worker left behind
        self._proc.wait(timeout=10)
        self._proc = None

    def kill(self) -> None:
        """SIGKILL the whole process group at once: a lost machine (the daemon and what it ran)."""
        if self._proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._proc.pid, signal.SIGKILL)
        self._proc.wait(timeout=30)
        self._proc = None

    def log_tail(self) -> str:
        """The last lines of the daemon's log, for an error message."""
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()[-_LOG_TAIL_LINES:]
        except OSError:
            return f"; no log at {self.log_path}"
        return f"; last lines of {self.log_path}:\n" + "\n".join(lines)


class SparkStandalone:
    """A Spark standalone master and ``workers`` workers on ``127.0.0.1``.

    Use as a context manager, or call :meth:`start` and :meth:`stop`. Workers are numbered
    from 1; :meth:`executor_pids` finds the executor JVMs a worker launched, to kill one.

    Args:
        workers: how many workers (each one core, :data:`WORKER_MEMORY`).
        base_dir: the workers' work folders (executor logs, fetched jars); by default a
            temporary folder that :meth:`stop` removes.
        log_dir: ``spark-master.log`` and ``spark-worker-<n>.log``; by default in base_dir.
        port: the master's port; a free one by default.
    """

    def __init__(
        self,
        workers: int = 2,
        base_dir: Path | None = None,
        log_dir: Path | None = None,
        port: int | None = None,
    ) -> None:
        if workers < 1:
            raise ValueError(f"a Spark cluster has at least one worker, not {workers}")
        self._owned_dir = None if base_dir else Path(tempfile.mkdtemp(prefix="headwater-spark-"))
        self.base_dir = Path(base_dir) if base_dir else self._owned_dir
        assert self.base_dir is not None
        logs = Path(log_dir) if log_dir else self.base_dir
        self.port = port or free_port()
        self.webui_port = free_port()
        self.master = SparkDaemon(
            "master",
            "org.apache.spark.deploy.master.Master",
            ["--host", "127.0.0.1", "--port", str(self.port), "--webui-port", str(self.webui_port)],
            logs / "spark-master.log",
        )
        self.workers = [
            SparkDaemon(
                f"worker-{n}",
                "org.apache.spark.deploy.worker.Worker",
                [
                    *("--host", "127.0.0.1", "--port", str(free_port())),
                    *("--webui-port", str(free_port()), "--cores", "1"),
                    *("--memory", WORKER_MEMORY, "--work-dir", str(self.base_dir / f"work-{n}")),
                    self.master_url,
                ],
                logs / f"spark-worker-{n}.log",
            )
            for n in range(1, workers + 1)
        ]

    @property
    def master_url(self) -> str:
        """What a driver is given as its master: ``spark://127.0.0.1:<port>``."""
        return f"spark://127.0.0.1:{self.port}"

    def driver_env(self) -> dict[str, str]:
        """The environment that puts an enricher on this cluster, one core per executor.

        ``PYSPARK_SUBMIT_ARGS`` is how pyspark passes options to the JVM it launches: the
        executors' size is the submitter's choice (the chart's, on Kubernetes), not a
        setting of the enricher.
        """
        return {
            "HEADWATER_ENRICHER_SPARK_MASTER": self.master_url,
            "SPARK_LOCAL_IP": "127.0.0.1",  # the driver's address, as executors reach it
            "PYSPARK_SUBMIT_ARGS": (
                f"--conf spark.executor.memory={EXECUTOR_MEMORY} "
                "--conf spark.executor.cores=1 pyspark-shell"
            ),
        }

    def _daemon_env(self) -> dict[str, str]:
        home = spark_home()
        return {
            **os.environ,
            "SPARK_HOME": str(home),
            "JAVA_HOME": str(Path(os.path.realpath(jvm.java())).parent.parent),
            "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
            "SPARK_LOCAL_IP": "127.0.0.1",
            # No REST submission server, no port beyond the ones chosen here.
            "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
        }

    def start(self, timeout: float = START_TIMEOUT_S) -> SparkStandalone:
        """Start the master and every worker; wait until the master lists them all alive.

        Raises:
            SparkClusterError: not whole within ``timeout`` seconds, or a daemon exited.
        """
        try:
            env = self._daemon_env()
            self.master.start(env)
            for worker in self.workers:
                worker.start(env)
            self.wait_workers(len(self.workers), timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop every worker (and its executors), then the master; a temp folder is removed."""
        for worker in self.workers:
            worker.stop()
        self.master.stop()
        if self._owned_dir is not None:
            shutil.rmtree(self._owned_dir, ignore_errors=True)

    def pids(self) -> dict[str, int]:
        """The running daemons' process ids: ``spark-master``, ``spark-worker-<n>``."""
        daemons = [self.master, *self.workers]
        return {f"spark-{d.name}": d.pid for d in daemons if d.pid is not None}

    def worker(self, n: int) -> SparkDaemon:
        """Worker ``n`` (from 1)."""
        return self.workers[n - 1]

    def state(self) -> dict[str, object]:
        """The master's view (its web UI's JSON): workers, applications, their cores."""
        url = f"http://127.0.0.1:{self.webui_port}/json/"
        with urllib.request.urlopen(url, timeout=5) as answer:
            return dict(json.load(answer))

    def alive_workers(self) -> int:
        """How many workers the master counts as alive (0 while it does not answer)."""
        try:
            workers = self.state().get("workers", [])
        except (OSError, ValueError):  # not listening yet, or an empty page while starting
            return 0
        assert isinstance(workers, list)
        return sum(1 for w in workers if w.get("state") == "ALIVE")

    def wait_workers(self, count: int, timeout: float = START_TIMEOUT_S) -> float:
        """Wait until the master lists ``count`` alive workers; return the seconds waited.

        Raises:
            SparkClusterError: a daemon exited, or fewer are alive after ``timeout`` seconds.
        """
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            for daemon in (self.master, *self.workers):
                if daemon.exited():
                    raise SparkClusterError(f"Spark {daemon.name} exited{daemon.log_tail()}")
            if self.alive_workers() == count:
                return time.monotonic() - started
            time.sleep(0.5)
        raise SparkClusterError(
            f"the Spark master at {self.master_url} did not list {count} alive workers "
            f"after {timeout:.0f}s{self.master.log_tail()}"
        )

    def executor_pids(self, n: int) -> list[int]:
        """The executor JVMs worker ``n`` runs now (its child processes)."""
        pid = self.worker(n).pid
        return executors_of(pid) if pid is not None else []

    def wait_executors(self, per_worker: int = 1, timeout: float = START_TIMEOUT_S) -> None:
        """Wait until every running worker runs ``per_worker`` executors.

        Raises:
            SparkClusterError: not so after ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        running = [n for n, w in enumerate(self.workers, 1) if w.pid is not None]
        while time.monotonic() < deadline:
            if all(len(self.executor_pids(n)) == per_worker for n in running):
                return
            time.sleep(0.5)
        counts = {n: len(self.executor_pids(n)) for n in running}
        raise SparkClusterError(f"executors per worker after {timeout:.0f}s: {counts}")

    def kill_executor(self, n: int) -> int:
        """SIGKILL the executor JVM of worker ``n`` (an OOM kill, a lost pod); its pid.

        Raises:
            SparkClusterError: worker ``n`` runs no executor.
        """
        pids = self.executor_pids(n)
        if not pids:
            raise SparkClusterError(f"Spark worker {n} runs no executor")
        os.kill(pids[0], signal.SIGKILL)
        return pids[0]

    def kill_worker(self, n: int) -> None:
        """SIGKILL worker ``n`` with its executors at once (a lost node), then start it again.

        The new worker is a replacement machine at the same address: the master accepts it
        only once it has dropped the lost one (it notices the closed connection), so this
        waits for that first. The application then gets an executor on it again.

        Raises:
            SparkClusterError: the master did not drop it, or the replacement did not join.
        """
        self.worker(n).kill()
        self.wait_workers(len(self.workers) - 1, timeout=60)
        self.worker(n).start(self._daemon_env())
        self.wait_workers(len(self.workers))

    def __enter__(self) -> SparkStandalone:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
