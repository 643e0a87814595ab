"""Every line on the enricher's stderr is JSON, Spark's JVM and Python workers included.

Spark's JVM is a child of this process and writes to the same stderr (file descriptor 2):
its log4j lines, and the ``print()`` calls of PySpark's stateful-operator driver worker
("Streaming TransformWithStateInPandas Python worker ...") that no setting turns off.
An operator reads JSON logs, so before Spark starts, descriptor 2 becomes a pipe; a
thread copies JSON lines to the real stderr as they are, drops PySpark's known chatter,
and wraps every other line in a JSON record with its level and logger, so nothing is lost.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import sys
import threading
from datetime import UTC, datetime

#: Lines PySpark prints on every query start or new device that tell an operator nothing.
CHATTER = (
    "Starting Streaming TransformWithStateInPandas Python worker",
    "Streaming TransformWithStateInPandas Python worker ",
)
#: Per new device: TransformWithStateInPySparkStateServer warns that its state is empty.
CHATTER_RE = re.compile(r"Value state \S+ doesn't contain a value")
#: A log4j line of Spark's default layout: "26/11/23 11:32:46 WARN Logger: message".
LOG4J = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (?P<level>[A-Z]+) (?P<logger>[^:\s]+): ")


def json_line(line: str) -> str | None:
    """Return ``line`` as a JSON log line, or None when it is dropped (blank or chatter)."""
    text = line.rstrip("\r\n")
    if not text.strip() or text.startswith(CHATTER) or CHATTER_RE.search(text):
        return None
    if text.startswith("{"):
        try:
            json.loads(text)
            return text
        except ValueError:
            pass
    entry = {
        "time": datetime.now(UTC).isoformat(timespec="milliseconds"),
        "level": "info",
        "logger": "spark.stderr",
        "message": text,
    }
    match = LOG4J.match(text)
    if match:
        entry["level"] = match["level"].lower().replace("warning", "warn")
        entry["logger"] = match["logger"]
        entry["message"] = text[match.end() :]
    return json.dumps(entry)


def route_stderr_through_json() -> None:
    """Replace descriptor 2 by a pipe whose lines reach the real stderr as JSON only."""
    real = os.dup(2)
    read_end, write_end = os.pipe()
    sys.stderr.flush()
    os.dup2(write_end, 2)
    os.close(write_end)
    copier = threading.Thread(target=_copy, args=(read_end, real), name="stderr-json", daemon=True)
    copier.start()

    def restore() -> None:
        # Our end of the pipe closes; the copier drains what was written and stops once
        # Spark's children have closed theirs too (bounded: the process is exiting).
        sys.stderr.flush()
        os.dup2(real, 2)
        copier.join(timeout=2)

    atexit.register(restore)


def _copy(read_end: int, real: int) -> None:
    with os.fdopen(read_end, "rb") as lines:
        for raw in lines:
            out = json_line(raw.decode("utf-8", "replace"))
            if out is not None:
                os.write(real, (out + "\n").encode())
