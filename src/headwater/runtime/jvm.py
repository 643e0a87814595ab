"""Where the JVM parts live: Java itself and the jars the install step copied from Maven.

``make install`` (run by ``make run`` and ``make test`` on first use) copies the jars that
``jvm/*/pom.xml`` pin into ``<venv>/jvm/<name>/``, so nothing is downloaded at run time, and
builds the enricher's keyed-state operator from ``jvm/enricher-state`` into
``<venv>/jvm/enricher-state/``.
``HEADWATER_JVM_DIR`` points elsewhere (the enricher image sets it).
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from headwater.errors import HeadwaterError
from headwater.runtime.settings import Settings, setting

#: The jar folders ``jvm/<name>/pom.xml`` fills.
KAFKA_BROKER = "kafka-broker"
SPARK_KAFKA = "spark-kafka"
#: The enricher's keyed-state operator, built from jvm/enricher-state (not downloaded).
ENRICHER_STATE = "enricher-state"


class JvmSetupError(HeadwaterError, RuntimeError):
    """Java or the project's jars are missing; the message says how to install them."""


@dataclass(frozen=True)
class JvmSettings(Settings):
    """Where the jars are (the enricher image sets it; ``make install`` fills the default)."""

    env_prefix: ClassVar[str] = "HEADWATER_"

    jvm_dir: str = setting(
        "",
        shown="<venv>/jvm",
        help="folder with one sub-folder of jars per `jvm/<name>/pom.xml`",
    )


def jvm_dir() -> Path:
    """Return the folder that holds one sub-folder of jars per ``jvm/<name>/pom.xml``."""
    return Path(JvmSettings.from_env().jvm_dir or Path(sys.prefix) / "jvm")


def jars(name: str) -> list[Path]:
    """Return the jars of ``name`` (``KAFKA_BROKER``, ``SPARK_KAFKA``, ``ENRICHER_STATE``).

    Raises:
        JvmSetupError: the folder has no jar (``make install`` was not run, or failed).
    """
    folder = jvm_dir() / name
    found = sorted(folder.glob("*.jar"))
    if not found:
        raise JvmSetupError(
            f"no jars in {folder}: run `make install` in the Headwater checkout (it copies "
            f"them from Maven Central with mvn), or set HEADWATER_JVM_DIR to a folder that "
            f"has {name}/*.jar"
        )
    return found


def java() -> str:
    """Return the ``java`` executable (``JAVA_HOME`` first, then ``PATH``); raise if absent."""
    home = os.environ.get("JAVA_HOME")
    candidate = Path(home) / "bin" / "java" if home else None
    if candidate is not None and candidate.is_file():
        return str(candidate)
    found = shutil.which("java")
    if not found:
        raise JvmSetupError("java not found: install Java 17 (or set JAVA_HOME)")
    return found
