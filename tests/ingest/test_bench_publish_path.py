"""The publish-path micro-benchmark measures the real servicer writing every call's record."""

from __future__ import annotations

import json

import pytest

from headwater_dev.bench import publish_path


def test_every_call_is_written_and_its_cpu_cost_is_printed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert publish_path.main(["--calls", "300", "--callers", "8", "--rounds", "2"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["records_written"] == 600  # one record per call, every round
    assert len(report["cpu_us_per_call"]) == 2
    assert all(x > 0 for x in report["cpu_us_per_call"])
