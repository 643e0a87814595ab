"""What a user needs to use a running dev stack: addresses, token, a ``buf curl`` call."""

from __future__ import annotations

import base64
import json
import shlex
import shutil
import sys
from datetime import UTC, datetime
from pathlib import Path

from headwater_dev.devstack.status_file import StackState
from headwater_dev.devstack.vendors import ACME_TELEMETRY

PUBLISH_METHOD = "headwater.ingest.v1.IngestService/PublishTelemetry"
#: The demo message: an ACME telemetry reading (the enricher knows the format).
DEMO_PAYLOAD = b'{"temp_c": 21.5, "hum_pct": 40.0}'


def buf_binary() -> str:
    """The ``buf`` installed beside this Python (the buf-bin wheel), else the one on PATH."""
    beside = Path(sys.executable).parent / "buf"
    return str(beside) if beside.exists() else shutil.which("buf") or "buf"


def publish_body(device_id: str, message_id: str = "quickstart-1") -> dict[str, object]:
    """Return a ``PublishTelemetryRequest`` in JSON with one demo message."""
    now = datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    return {
        "messages": [
            {
                "messageId": message_id,
                "deviceId": device_id,
                "deviceTime": now,
                "sequence": "1",
                "contentType": ACME_TELEMETRY,
                "payload": base64.b64encode(DEMO_PAYLOAD).decode(),
            }
        ]
    }


def _buf_curl_parts(state: StackState, message_id: str) -> list[list[str]]:
    """The ``buf curl`` call in parts that belong on one line together."""
    body = json.dumps(publish_body(state.device_id, message_id), separators=(",", ":"))
    return [
        [buf_binary(), "curl", "--protocol", "grpc", "--http2-prior-knowledge", "--emit-defaults"],
        ["-H", f"Authorization: Bearer {state.token}"],
        ["-d", body],
        [f"http://{state.grpc_target}/{PUBLISH_METHOD}"],
    ]


def buf_curl_args(state: StackState, message_id: str = "quickstart-1") -> list[str]:
    """Return the ``buf curl`` command line that publishes one demo message."""
    return [arg for part in _buf_curl_parts(state, message_id) for arg in part]


def connection_info(state: StackState) -> dict[str, object]:
    """The facts ``up`` and ``status --json`` report."""
    metrics = {"ingest": state.metrics_url("ingest")}
    if state.with_enricher:
        metrics["enricher"] = state.metrics_url("enricher")
    return {
        "status": state.status,
        "workdir": state.workdir,
        "supervisor_pid": state.supervisor_pid,
        "grpc": state.grpc_target,
        "token": state.token,
        "gateway_id": state.gateway_id,
        "device_id": state.device_id,
        "kafka_bootstrap_servers": state.bootstrap_servers,
        "metrics": metrics,
        "buf_curl": buf_curl_args(state),
    }


def connection_text(state: StackState) -> str:
    """The lines a person reads after ``up``: where things are and what to try first."""
    workdir = Path(state.workdir)
    rows = [
        ("gRPC (ingest)", f"{state.grpc_target}  (plaintext; server reflection on)"),
        ("bearer token", f"{state.token}  (gateway {state.gateway_id}, any device)"),
        ("tokens file", str(workdir / "tokens.yaml")),
        ("Kafka bootstrap", state.bootstrap_servers),
        ("metrics (ingest)", state.metrics_url("ingest")),
    ]
    if state.with_enricher:
        rows.append(("metrics (enricher)", state.metrics_url("enricher")))
    rows.append(("logs and state", str(workdir)))
    width = max(len(name) for name, _ in rows)
    lines = [f"  {name:<{width}}  {value}" for name, value in rows]
    command = " \\\n      ".join(
        shlex.join(part) for part in _buf_curl_parts(state, "quickstart-1")
    )
    watch = f"headwater devstack watch --workdir {shlex.quote(str(workdir))}"
    lines += [
        "",
        f"Publish a message (device {state.device_id} has master data):",
        "",
        f"  {command}",
        "",
        f"Watch events and completions arrive:  {watch}",
        f"Stop everything:                      headwater devstack down --workdir "
        f"{shlex.quote(str(workdir))}",
    ]
    return "\n".join(lines)
