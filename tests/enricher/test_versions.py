"""One Spark version everywhere: the driver's Python must match the JVM it talks to.

PySpark (pyproject), Spark's Kafka connector (jvm/spark-kafka/pom.xml), the enricher image
(Dockerfile) and the Spark Operator's ``sparkVersion`` (chart values) must name the same
release; the embedded broker's version constant must match its pom.
"""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

import yaml

from headwater_dev.devstack.broker import KAFKA_VERSION

ROOT = Path(__file__).resolve().parents[2]
POM_NS = {"m": "http://maven.apache.org/POM/4.0.0"}


def pom_property(pom: str, name: str) -> str:
    text = ET.parse(ROOT / pom).getroot().find(f"m:properties/m:{name}", POM_NS)
    assert text is not None and text.text, f"{pom} has no <{name}>"
    return text.text


def pyspark_pin() -> str:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    deps = project["optional-dependencies"]["enricher"]
    (pin,) = [d for d in deps if d.startswith("pyspark")]
    match = re.fullmatch(r"pyspark==(\S+)", pin)
    assert match, f"pyspark must be pinned exactly (the connector matches it): {pin!r}"
    return match.group(1)


def test_pyspark_connector_image_and_chart_name_one_spark_release() -> None:
    pin = pyspark_pin()
    dockerfile = (ROOT / "services/enricher/Dockerfile").read_text()
    (image,) = re.findall(r"^ARG SPARK_VERSION=(\S+)$", dockerfile, re.MULTILINE)
    chart = yaml.safe_load((ROOT / "helm/headwater/values.yaml").read_text())
    assert {
        "pyproject pyspark": pin,
        "installed pyspark": importlib.metadata.version("pyspark"),
        "jvm/spark-kafka/pom.xml": pom_property("jvm/spark-kafka/pom.xml", "spark.version"),
        "jvm/enricher-state/pom.xml": pom_property("jvm/enricher-state/pom.xml", "spark.version"),
        "enricher Dockerfile": image,
        "chart enricher.sparkVersion": chart["enricher"]["sparkVersion"],
    } == dict.fromkeys(
        [
            "pyproject pyspark",
            "installed pyspark",
            "jvm/spark-kafka/pom.xml",
            "jvm/enricher-state/pom.xml",
            "enricher Dockerfile",
            "chart enricher.sparkVersion",
        ],
        pin,
    )


def test_embedded_broker_version_matches_its_pom() -> None:
    assert pom_property("jvm/kafka-broker/pom.xml", "kafka.version") == KAFKA_VERSION
