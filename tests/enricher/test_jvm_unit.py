"""The JVM keyed-state operator's JUnit tests (jvm/enricher-state), run as part of the suite.

``make install`` built the module once, which filled Maven's local repository with
everything the tests need; here Maven runs offline (``-o``), so the suite never downloads.
Each JUnit report is read back so a failing Java test names itself in pytest's output.
"""

from __future__ import annotations

import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

MODULE = Path(__file__).resolve().parents[2] / "jvm" / "enricher-state"


def test_junit_suite_passes() -> None:
    """Every JUnit test of the module passes, and there are some (a silent no-op would not fail)."""
    mvn = shutil.which("mvn")
    if mvn is None:
        pytest.fail("mvn is required to run the JVM module's tests (make install needs it too)")
    reports_dir = MODULE / "target" / "surefire-reports"
    # Reports of an earlier run must not count as this run's.
    shutil.rmtree(reports_dir, ignore_errors=True)
    run = subprocess.run(
        [mvn, "-o", "-q", "-B", "-f", str(MODULE / "pom.xml"), "test"],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    reports = sorted(reports_dir.glob("TEST-*.xml"))
    failures = []
    tests = 0
    for report in reports:
        suite = ET.parse(report).getroot()
        tests += int(suite.get("tests", 0))
        for case in suite.iter("testcase"):
            for bad in (*case.iter("failure"), *case.iter("error")):
                failures.append(f"{case.get('classname')}.{case.get('name')}: {bad.get('message')}")
    assert run.returncode == 0, "\n".join(failures) or run.stdout[-4000:] + run.stderr[-4000:]
    assert tests > 0, "no JUnit test ran"
