"""``python -m headwater.gateway.bench`` runs end to end on a few hundred messages and prints
every scenario and the ratio (tests/bench checks its JSON report)."""

from __future__ import annotations

import re
import subprocess
import sys


def test_gateway_bench_entry_point_prints_figures_and_the_ratio(kafka_bootstrap: str) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "headwater.gateway.bench",
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
