"""``headwater bench gateway`` prints every scenario and the ratio as text (test_gateway_bench
checks its JSON report); ``headwater bench enricher`` hands its arguments to the enricher's."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from headwater import cli


def test_gateway_bench_prints_figures_and_the_ratio(kafka_bootstrap: str) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "headwater.cli",
            "bench",
            "gateway",
            "--messages",
            "300",
            "--frame",
            "50",
            "--bootstrap",
            kafka_bootstrap,
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    rates = dict(
        re.findall(r"^(direct \(no spool\)|spooled, FULL[^\d]*?)\s+([\d,]+)\s*$", out.stdout, re.M)
    )
    assert set(rates) == {"direct (no spool)", "spooled, FULL, enqueue in batches"}, out.stdout
    assert all(int(v.replace(",", "")) > 0 for v in rates.values())
    ratio = re.search(r"^spooled / direct: (\d+)%$", out.stdout, re.M)
    assert ratio and 0 < int(ratio.group(1)) < 1000, out.stdout


def test_bench_enricher_runs_the_enricher_benchmark_with_its_own_arguments(monkeypatch) -> None:
    from headwater_dev.bench.enricher import query as bench

    seen: list[list[str]] = []
    monkeypatch.setattr(bench, "main", lambda argv: seen.append(argv) or 0)
    argv = ["--devices", "10", "20", "--no-floor", "--conf", "a=b"]
    assert cli.main(["bench", "enricher", *argv]) == 0
    assert seen == [argv]


def test_unknown_arguments_are_still_refused_elsewhere(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["bench", "gateway", "--devices", "10"])
    assert exit_.value.code == 2
    assert "unrecognized arguments: --devices 10" in capsys.readouterr().err
