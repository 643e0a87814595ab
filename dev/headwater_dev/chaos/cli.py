"""``headwater chaos``: provoke the faults production sees, on a dev stack, on purpose.

Dev and staging only. Dry run by default: each command prints what it would do and what
to watch; ``--execute`` does it. It acts on the background dev stack (``headwater devstack
up --brokers 3``, ``--spark-workers 2`` for executors; devstack.py), or, given
``--namespace``, on Kubernetes: ``kill-broker`` and ``kill-executor`` delete one Strimzi
broker pod or one Spark executor pod (kube.py), and refuse a production namespace or
context (production.py). docs/operations.md has the runbook of each fault.
"""

from __future__ import annotations

import argparse
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from headwater_dev.chaos.devstack import Node
    from headwater_dev.chaos.kube import Role
    from headwater_dev.devstack.status_file import StackState


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``chaos`` command group."""
    group = subparsers.add_parser(
        "chaos",
        help="fail a broker or a Spark executor of the dev stack or of a staging Kubernetes "
        "namespace on purpose (dry run unless --execute)",
        description=(
            "Provoke a broker fault on the background dev stack (`headwater devstack up "
            "--brokers 3`): the stack's supervisor starts a lost node again, as Kubernetes "
            "restarts a broker pod; or lose a Spark executor (`up --spark-workers 2`). "
            "With --namespace, kill-broker and kill-executor delete one Strimzi broker pod "
            "or one Spark executor pod on Kubernetes instead, and refuse a namespace or "
            "kube context marked as production. Without --execute nothing is done: the plan "
            "and what to watch are printed. Exits 2 when there is nothing of the kind to act "
            "on, or the target is refused."
        ),
    )
    commands = group.add_subparsers(dest="chaos_command", required=True, metavar="COMMAND")
    kill = commands.add_parser(
        "kill-broker",
        help="SIGKILL one Kafka node (a lost machine); the supervisor starts it again",
        description=(
            "SIGKILL one Kafka node: its partitions elect new leaders after the broker "
            "session times out (about 10 s); producers retry, ingest answers UNAVAILABLE "
            "with RetryInfo or waits within the call's deadline, never a false OK."
        ),
    )
    kill.add_argument(
        "--leader-of",
        metavar="TOPIC",
        help="the node leading TOPIC's partition 0 (default: node N, on Kubernetes the last "
        "broker pod; there, give --bootstrap-servers too)",
    )
    kill.set_defaults(func=_kill)
    pause = commands.add_parser(
        "pause-broker",
        help="SIGSTOP one Kafka node for --seconds, then SIGCONT (a GC pause or VM stall)",
        description=(
            "Freeze one Kafka node (SIGSTOP), then resume it (SIGCONT): alive to the kernel, "
            "silent to its peers. Longer than the broker session (9 s), it is fenced and "
            "its partitions move; shorter, clients only wait."
        ),
    )
    pause.add_argument("--seconds", type=float, default=15.0, help="how long (default 15)")
    pause.add_argument("--leader-of", metavar="TOPIC", help="the node leading TOPIC's partition 0")
    pause.set_defaults(func=_pause)
    roll = commands.add_parser(
        "roll-brokers",
        help="restart every Kafka node in turn (SIGTERM), the next once all is in sync",
        description=(
            "A rolling restart, as an upgrade does it: each node stopped with SIGTERM "
            "(controlled shutdown: its leaderships move first), started again by the "
            "supervisor, and the next one only when every replica is back in sync."
        ),
    )
    roll.add_argument(
        "--timeout", type=float, default=180.0, help="seconds per node to be back in sync"
    )
    roll.set_defaults(func=_roll)
    executor = commands.add_parser(
        "kill-executor",
        help="SIGKILL one Spark executor JVM of the enricher (an OOM kill, a lost node)",
        description=(
            "SIGKILL the executor JVM of one Spark worker of a stack started with "
            "`headwater devstack up --spark-workers 2`: its tasks are retried on another "
            "executor, the keyed state it held reloads there from the checkpoint, and its "
            "worker launches a new executor. Every message still gets one terminal completion."
        ),
    )
    executor.add_argument(
        "--worker", type=int, help="the worker whose executor dies (default: the first with one)"
    )
    executor.set_defaults(func=_kill_executor)
    for command in (kill, pause, roll, executor):
        command.add_argument(
            "--workdir", type=Path, default=Path(".devstack"), help="the dev stack's folder"
        )
        command.add_argument("--execute", action="store_true", help="do it (default: dry run)")
    _add_kubernetes_options(executor)
    kill_kube = _add_kubernetes_options(kill)
    kill_kube.add_argument(
        "--kafka-cluster",
        default="headwater",
        help="on Kubernetes: the Strimzi Kafka resource's name (default headwater, as "
        "k8s/kafka.yaml)",
    )
    kill_kube.add_argument(
        "--bootstrap-servers",
        metavar="HOST:PORT",
        help="on Kubernetes with --leader-of: the brokers' address as reachable from here "
        "(the leader is asked of Kafka, then its pod deleted: the one named <...>-<node id>)",
    )


def _add_kubernetes_options(command: argparse.ArgumentParser) -> argparse._ArgumentGroup:
    """Add the options that point a command at Kubernetes; return their group."""
    from headwater_dev.chaos.production import OVERRIDE_FLAG, PRODUCTION_LABELS

    kube = command.add_argument_group(
        "Kubernetes", "given --namespace, delete one pod there instead of acting on the dev stack"
    )
    kube.add_argument("--namespace", help="the release's namespace (acts on Kubernetes)")
    kube.add_argument("--kube-context", help="kubeconfig context (default: the current one)")
    kube.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
    kube.add_argument("--release", default="headwater", help="Helm release (default headwater)")
    kube.add_argument("--pod", help="the pod (default: the last broker, the first executor)")
    kube.add_argument(
        "--grace-seconds",
        type=int,
        help="deletion grace period (default: the pod's own; 0: killed at once, a lost node)",
    )
    kube.add_argument(
        OVERRIDE_FLAG,
        dest="production_ok",
        action="store_true",
        help="act on production anyway: a namespace labelled "
        f"{', '.join(PRODUCTION_LABELS)} = production or prod, or a context or cluster whose "
        "name has the word prod or production",
    )
    return kube


def _nodes(args: argparse.Namespace) -> tuple[StackState, list[Node]]:
    """The stack's Kafka nodes, or exit 2 saying why there are none to act on."""
    from headwater_dev.chaos.devstack import ChaosError, cluster_nodes

    try:
        return cluster_nodes(args.workdir)
    except ChaosError as exc:
        print(exc)
        raise SystemExit(2) from None


def _announce(args: argparse.Namespace, doing: str, hints: list[str]) -> bool:
    """Print the plan and what to watch; True when it is to be carried out."""
    print(("doing: " if args.execute else "dry run, would do: ") + doing)
    print("watch:")
    for hint in hints:
        print(f"  {hint}")
    if not args.execute:
        print("nothing done: add --execute to do it")
    return bool(args.execute)


def _kill(args: argparse.Namespace) -> int:
    from headwater_dev.chaos.devstack import pick, signal_node, watch_hints

    if _on_kubernetes(args):
        if args.leader_of and args.pod:
            print("--leader-of and --pod both name the pod to delete: give one of them")
            return 2
        if args.leader_of and not args.bootstrap_servers:
            print("--leader-of on Kubernetes asks Kafka who leads: give --bootstrap-servers too")
            return 2
        from headwater_dev.chaos.kube import broker_role

        role = broker_role(args.namespace, args.kafka_cluster, args.release)
        return _delete_pod(args, role, leader_of=args.leader_of)
    state, nodes = _nodes(args)
    node = pick(nodes, state.bootstrap_servers, args.leader_of)
    why = f", leader of {args.leader_of}[0]" if args.leader_of else ""
    doing = f"SIGKILL Kafka node {node.node_id} (pid {node.pid}{why})"
    if _announce(args, doing, watch_hints(state, node)):
        signal_node(node, signal.SIGKILL)
        print(f"killed node {node.node_id}; the supervisor starts it again within seconds")
    return 0


def _pause(args: argparse.Namespace) -> int:
    from headwater_dev.chaos.devstack import pick, signal_node, watch_hints

    state, nodes = _nodes(args)
    node = pick(nodes, state.bootstrap_servers, args.leader_of)
    doing = (
        f"SIGSTOP Kafka node {node.node_id} (pid {node.pid}) for {args.seconds:g}s, then SIGCONT"
    )
    if _announce(args, doing, watch_hints(state, node)):
        signal_node(node, signal.SIGSTOP)
        try:
            time.sleep(args.seconds)
        finally:
            signal_node(node, signal.SIGCONT)  # even on Ctrl-C: never leave a node frozen
        print(f"resumed node {node.node_id} after {args.seconds:g}s")
    return 0


def _roll(args: argparse.Namespace) -> int:
    from headwater_dev.chaos.devstack import (
        ChaosError,
        signal_node,
        wait_replaced_and_in_sync,
        watch_hints,
    )

    state, nodes = _nodes(args)
    doing = (
        f"SIGTERM Kafka nodes {', '.join(str(n.node_id) for n in nodes)} one at a time, each "
        f"next once every replica is in sync again (at most {args.timeout:g}s per node)"
    )
    if not _announce(args, doing, watch_hints(state, nodes[0])):
        return 0
    for node in nodes:
        _, current = _nodes(args)
        node = next(n for n in current if n.node_id == node.node_id)
        signal_node(node, signal.SIGTERM)
        try:
            took = wait_replaced_and_in_sync(args.workdir, node, args.timeout)
        except ChaosError as exc:
            print(f"stopped the roll: {exc}")
            return 1
        print(f"node {node.node_id} restarted and in sync after {took:.1f}s")
    print("rolled every node")
    return 0


def _kill_executor(args: argparse.Namespace) -> int:
    import os

    from headwater_dev.chaos.devstack import ChaosError, spark_executors

    if _on_kubernetes(args):
        if args.worker:
            print("--worker works on the dev stack only; on Kubernetes name a pod with --pod")
            return 2
        from headwater_dev.chaos.kube import executor_role

        return _delete_pod(args, executor_role(args.namespace, args.release))
    try:
        state, executors = spark_executors(args.workdir)
        worker = args.worker or next((n for n, pids in executors.items() if pids), 0)
        if not executors.get(worker):
            raise ChaosError(
                f"Spark worker {worker or '(any)'} runs no executor now: workers "
                f"{sorted(executors)} of the stack in {args.workdir} (is the enricher up?)"
            )
    except ChaosError as exc:
        print(exc)
        return 2
    pid = executors[worker][0]
    workdir = Path(state.workdir)
    hints = [
        f'{workdir / "enricher.log"}   ("Lost executor", then the tasks retried elsewhere)',
        f"{workdir / f'spark-worker-{worker}.log'}   (the worker launching a new executor)",
        f"{state.metrics_url('enricher')}   (batches go on after a pause; nothing skipped)",
        "headwater devstack watch --topic completions.v1   (one terminal completion each)",
    ]
    doing = f"SIGKILL the executor JVM of Spark worker {worker} (pid {pid})"
    if _announce(args, doing, hints):
        os.kill(pid, signal.SIGKILL)
        print(f"killed executor pid {pid}; worker {worker} launches another within seconds")
    return 0


def _on_kubernetes(args: argparse.Namespace) -> bool:
    """True with --namespace; exit 2 for a Kubernetes option given without it."""
    if args.namespace:
        return True
    if args.kube_context or args.kubeconfig or args.pod or getattr(args, "bootstrap_servers", None):
        print(
            "--kube-context, --kubeconfig, --pod and --bootstrap-servers act on Kubernetes: "
            "give --namespace too"
        )
        raise SystemExit(2)
    return False


def _delete_pod(args: argparse.Namespace, role: Role, leader_of: str | None = None) -> int:
    """Delete one pod of ``role`` in ``--namespace``, unless that is production (exit 2).

    With ``leader_of``, the broker pod leading that topic's partition 0 (Kafka at
    ``--bootstrap-servers`` says which node; its pod is the one named after the node id).
    """
    from headwater_dev.chaos.devstack import ChaosError, leader_id
    from headwater_dev.chaos.kube import Kube, choose, node_pod
    from headwater_dev.chaos.production import production_refusal, refusal_line

    try:
        kube = Kube.connect(args.namespace, args.kube_context, args.kubeconfig)
        refusal = production_refusal(
            kube.context, kube.cluster, args.namespace, kube.namespace_labels()
        )
        if refusal and not args.production_ok:
            print(refusal_line(refusal))
            return 2
        running = kube.running(role)
        if leader_of:
            node = leader_id(args.bootstrap_servers, leader_of, "Kafka")
            pod = node_pod(role, running, node, args.namespace)
        else:
            pod = choose(role, running, args.pod, args.namespace)
    except ChaosError as exc:
        print(exc)
        return 2
    grace = "" if args.grace_seconds is None else f", grace {args.grace_seconds}s"
    why = f", leader of {leader_of}[0]" if leader_of else ""
    doing = f"delete {role.what} {pod}{why} in {args.namespace} (context {kube.context}{grace})"
    if _announce(args, doing, list(role.watch)):
        uid = kube.delete(pod, args.grace_seconds)
        print(f"deleted {role.what} {pod} (uid {uid})")
    return 0
