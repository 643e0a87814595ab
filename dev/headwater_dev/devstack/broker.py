"""The embedded broker: a real single-node Apache Kafka (KRaft) on loopback.

One JVM runs broker and controller together, from the jars ``make install`` copied from
Maven Central (``jvm/kafka-broker/pom.xml``). The dev stack and the test suite use it, so
every guarantee is proved against the broker users run. Any other Kafka is used instead by
setting ``HEADWATER_KAFKA_BOOTSTRAP_SERVERS`` (and, for the tests, ``HEADWATER_TEST_KAFKA``).

Ready means the broker answered a metadata request and acknowledged an ``acks=all``
produce: an open port is not ready (the controller may not have elected itself yet).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from headwater.errors import HeadwaterError
from headwater.runtime import jvm
from headwater_dev.devstack.ports import free_port

KAFKA_VERSION = "4.4.0"
#: One fixed cluster id: a data folder formatted once is reused by later starts.
CLUSTER_ID = "aGVhZHdhdGVyLWRldmtmaw"
#: The topic readiness produces to (acks=all); Headwater never reads it.
READINESS_TOPIC = "_headwater.broker-ready"
#: Enough for the suite's traffic, small enough for a 2-core machine beside Spark.
HEAP = "-Xmx768m"
START_TIMEOUT_S = 90.0
_LOG_TAIL_LINES = 30


class BrokerStartError(HeadwaterError, RuntimeError):
    """The embedded broker did not become ready in time; the message has its log's tail."""


def server_properties(
    data_dir: Path,
    port: int,
    controller_port: int,
    advertised_port: int,
    node_id: int = 1,
    voters: str | None = None,
) -> dict[str, str]:
    """Return the configuration of one combined broker and controller node on loopback.

    ``voters`` is the controller quorum (``id@host:port,...``); by default the node alone,
    a single-node cluster. :mod:`headwater_dev.devstack.cluster` adds the replication
    settings of a cluster on top.
    """
    return {
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        "controller.quorum.voters": voters or f"{node_id}@127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{advertised_port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(data_dir / "logs"),
        # Topics are created on purpose (headwater topics ensure); a typo must not create one.
        "auto.create.topics.enable": "false",
        # One node: every internal topic has one replica.
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "8",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "4",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        # Dev and tests start consumer groups constantly; waiting 3 s for more members is
        # only useful in production.
        "group.initial.rebalance.delay.ms": "0",
        "num.network.threads": "2",
        "num.io.threads": "4",
    }


def _log4j2(log_file: Path) -> str:
    # Properties format: log4j2 reads it without extra jars.
    return "\n".join(
        [
            "status = warn",
            "appender.file.type = File",
            "appender.file.name = file",
            f"appender.file.fileName = {log_file}",
            "appender.file.layout.type = PatternLayout",
            "appender.file.layout.pattern = [%d] %p %m (%c)%n",
            "rootLogger.level = INFO",
            "rootLogger.appenderRef.file.ref = file",
            # Per-segment and per-partition chatter: thousands of lines in a test run.
            "logger.log.name = kafka.log",
            "logger.log.level = WARN",
            "logger.storage.name = org.apache.kafka.storage",
            "logger.storage.level = WARN",
            "logger.state.name = state.change.logger",
            "logger.state.level = WARN",
            "",
        ]
    )


def _with_listeners(
    conf: dict[str, str], extra: Mapping[str, tuple[str, int]], host: str
) -> dict[str, str]:
    """Return ``conf`` with the ``extra`` client listeners added (advertised as they listen)."""
    if not extra:
        return conf
    added = {name.upper(): (protocol.upper(), port) for name, (protocol, port) in extra.items()}
    urls = ",".join(f"{name}://{host}:{port}" for name, (_, port) in added.items())
    protocols = ",".join(f"{name}:{protocol}" for name, (protocol, _) in added.items())
    return conf | {
        "listeners": f"{conf['listeners']},{urls}",
        "advertised.listeners": f"{conf['advertised.listeners']},{urls}",
        "listener.security.protocol.map": f"{conf['listener.security.protocol.map']},{protocols}",
    }


def _properties(conf: Mapping[str, str]) -> str:
    return "".join(f"{k}={v}\n" for k, v in conf.items())


class EmbeddedBroker:
    """An Apache Kafka broker process listening on ``127.0.0.1:<port>``.

    Use as a context manager, or call :meth:`start` and :meth:`stop`.

    Args:
        port: the client port; a free one by default.
        log_path: the broker's log file; ``<data_dir>/server.log`` by default.
        advertised_port: the port clients are told to use (a test puts a fault proxy there).
        data_dir: keeps the broker's data across starts (formatted once); by default a
            temporary folder that :meth:`stop` removes.
        config: extra or overriding broker properties.
        extra_listeners: more client listeners, ``{name: (security protocol, port)}``, e.g.
            ``{"SASL_SSL": ("SASL_SSL", 19093)}``; their TLS and SASL properties go in
            ``config`` (``listener.name.<name>.*``). Readiness is checked on the PLAINTEXT one.
        scram_credentials: SCRAM users written when the data folder is formatted, as
            ``kafka-storage format --add-scram`` takes them:
            ``SCRAM-SHA-512=[name=alice,password=secret]``. KRaft has no other way to hold a
            credential before a client can authenticate.
        node_id, controller_port, voters: this node's place in a multi-node cluster
            (:class:`headwater_dev.devstack.cluster.BrokerCluster` sets them); by default
            a single node that is its own controller quorum.
    """

    def __init__(
        self,
        port: int | None = None,
        log_path: Path | None = None,
        advertised_port: int | None = None,
        data_dir: Path | None = None,
        config: Mapping[str, str] | None = None,
        extra_listeners: Mapping[str, tuple[str, int]] | None = None,
        scram_credentials: Sequence[str] = (),
        node_id: int = 1,
        controller_port: int | None = None,
        voters: str | None = None,
    ) -> None:
        self.host = "127.0.0.1"
        self.port = port or free_port()
        self.node_id = node_id
        # Chosen once: a node restarted (after kill()) must rejoin the quorum at its address.
        self.controller_port = controller_port or free_port()
        self._voters = voters
        self.advertised_port = advertised_port or self.port
        self._data_dir = Path(data_dir) if data_dir else None
        self._log_path = Path(log_path) if log_path else None
        self._config = dict(config or {})
        self._extra_listeners = dict(extra_listeners or {})
        self._scram_credentials = list(scram_credentials)
        self._owned_dir: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap_servers(self) -> str:
        """The ``host:port`` clients connect to."""
        return f"{self.host}:{self.advertised_port}"

    @property
    def data_dir(self) -> Path:
        """The folder with the broker's configuration, data and (by default) log."""
        if self._data_dir is None:
            self._owned_dir = Path(tempfile.mkdtemp(prefix="headwater-kafka-"))
            self._data_dir = self._owned_dir
        return self._data_dir

    @property
    def log_path(self) -> Path:
        """The broker's log file."""
        return self._log_path or self.data_dir / "server.log"

    @property
    def pid(self) -> int | None:
        """The broker's process id while it runs."""
        return self._proc.pid if self._proc is not None else None

    def start(self, timeout: float = START_TIMEOUT_S, wait: bool = True) -> EmbeddedBroker:
        """Start the broker and wait until it is ready (idempotent).

        ``wait=False`` only launches the process: a node of a cluster cannot be ready
        alone (its quorum needs a majority), so the cluster waits for all of them at once.

        Raises:
            BrokerStartError: not ready within ``timeout`` seconds, or the process exited.
            headwater.runtime.jvm.JvmSetupError: Java or the broker's jars are missing.
        """
        if self._proc is not None:
            return self
        java, classpath = jvm.java(), os.pathsep.join(map(str, jvm.jars(jvm.KAFKA_BROKER)))
        data = self.data_dir
        data.mkdir(parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        props = data / "server.properties"
        conf = server_properties(
            data, self.port, self.controller_port, self.advertised_port, self.node_id, self._voters
        )
        conf = _with_listeners(conf, self._extra_listeners, self.host)
        props.write_text(_properties(conf | self._config))
        (data / "log4j2.properties").write_text(_log4j2(self.log_path))
        base = [java, HEAP, f"-Dlog4j2.configurationFile={data / 'log4j2.properties'}"]
        base += ["-Djava.awt.headless=true", "-cp", classpath]
        if not (data / "logs" / "meta.properties").exists():
            self._format(base, props)
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                [*base, "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "kafka.Kafka", str(props)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # a Ctrl-C meant for the caller reaches us via stop()
            )
        if not wait:
            return self
        try:
            self._wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _format(self, base: list[str], props: Path) -> None:
        scram = [arg for cred in self._scram_credentials for arg in ("--add-scram", cred)]
        done = subprocess.run(
            [
                *base,
                *("kafka.tools.StorageTool", "format", "-t", CLUSTER_ID, "-c", str(props)),
                *scram,
            ],
            capture_output=True,
            timeout=120,
            check=False,
        )
        if done.returncode != 0:
            raise BrokerStartError(
                f"formatting {props.parent} failed (exit {done.returncode}): "
                f"{(done.stderr or done.stdout).decode(errors='replace')[-2000:]}"
            )

    def _wait_ready(self, timeout: float) -> None:
        wait_ready(self.bootstrap_servers, [self], timeout)

    def exit_message(self) -> str:
        """Say how the process exited, with its log's tail (for a start that failed)."""
        code = self._proc.returncode if self._proc is not None else None
        return f"Apache Kafka node {self.node_id} exited with code {code} while starting" + (
            self.log_tail()
        )

    def exited(self) -> bool:
        """Whether the process was started and has exited on its own."""
        return self._proc is not None and self._proc.poll() is not None

    def log_tail(self) -> str:
        """The last lines of the log, to put in an error message."""
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()[-_LOG_TAIL_LINES:]
        except OSError:
            return f"; no log at {self.log_path}"
        return f"; last lines of {self.log_path}:\n" + "\n".join(lines)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the broker (controlled shutdown, then kill after ``timeout``); idempotent.

        A temporary data folder is removed; a ``data_dir`` given by the caller is kept.
        """
        if self._proc is not None:
            self._proc.send_signal(signal.SIGCONT)  # a paused broker cannot act on SIGTERM
            self._proc.terminate()
            try:
                self._proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=10)
            self._proc = None
        if self._owned_dir is not None:
            shutil.rmtree(self._owned_dir, ignore_errors=True)
            self._owned_dir = self._data_dir = None

    def kill(self) -> None:
        """SIGKILL the process, as a lost machine would; the data stays (start() again)."""
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait(timeout=30)
            self._proc = None

    def pause(self) -> None:
        """SIGSTOP the process: alive to the kernel, silent to its peers (a GC or VM stall)."""
        if self._proc is not None:
            self._proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT a paused process."""
        if self._proc is not None:
            self._proc.send_signal(signal.SIGCONT)

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def wait_ready(
    bootstrap: str, nodes: Sequence[EmbeddedBroker], timeout: float, replicas: int = 1
) -> None:
    """Wait until the metadata lists every node and an ``acks=all`` produce is acknowledged.

    The produce goes to :data:`READINESS_TOPIC`, created with ``replicas`` replicas: on a
    cluster an acknowledgement then means every node replicates and the quorum works.

    Raises:
        BrokerStartError: not ready within ``timeout`` seconds, or a node's process exited.
    """
    deadline = time.monotonic() + timeout
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    while time.monotonic() < deadline:
        for node in nodes:
            if node.exited():
                raise BrokerStartError(node.exit_message())
        with contextlib.suppress(KafkaException):
            listed = admin.list_topics(timeout=1).brokers
            if len(listed) >= len(nodes) and _produce_once(bootstrap, admin, replicas):
                return
        time.sleep(0.2)
    raise BrokerStartError(
        f"Apache Kafka on {bootstrap} was not ready after {timeout:.0f}s "
        f"(every node in the metadata and an acks=all produce){nodes[0].log_tail()}"
    )


def _produce_once(bootstrap: str, admin: AdminClient, replicas: int) -> bool:
    if READINESS_TOPIC not in admin.list_topics(timeout=1).topics:
        future = admin.create_topics([NewTopic(READINESS_TOPIC, 1, replicas)])[READINESS_TOPIC]
        with contextlib.suppress(KafkaException):
            future.result(timeout=5)
    errors: list[object] = []
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "message.timeout.ms": 2000,
            "log_level": 0,
        }
    )
    producer.produce(READINESS_TOPIC, b"ready", on_delivery=lambda e, _m: errors.append(e))
    producer.flush(3)
    return errors == [None]
