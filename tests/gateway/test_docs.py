"""The examples in docs/gateway.md run as written, against the real ingest service."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path

from tests.support.tls_certs import issue, make_ca, write_pem

from .conftest import TOKENS

DOC = Path(__file__).parents[2] / "docs" / "gateway.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)


async def test_every_python_example_runs(start_ingest, ingest_settings, tmp_path: Path) -> None:
    running = await start_ingest(ingest_settings)
    ca_pem, ca_key, ca_cert = make_ca()
    (tmp_path / "ca.crt").write_bytes(ca_pem.cert)
    write_pem(tmp_path, "gateway", issue(ca_key, ca_cert, "gw-a", server=False))
    env = os.environ | {
        "SPOOL_PATH": str(tmp_path / "spool.db"),
        "HEADWATER_GATEWAY_TARGET": running.target,
        "HEADWATER_GATEWAY_TOKEN": TOKENS["gw-a"],
    }
    blocks = python_blocks()
    assert len(blocks) == 4
    outputs = []
    for block in blocks:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            block,
            cwd=tmp_path,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, f"{block}\n{err.decode()[-2000:]}"
        outputs.append(out.decode())
    use, full, from_env, _tls = outputs
    # The first example delivered its 101 messages and printed the spool's stats.
    assert "depth=0" in use and "'delivered': 101" in use, use
    assert re.search(r"spooled \S+ sequence 1\n", use), use
    # The refuse policy raised a retriable SpoolFullError and counted it.
    assert "retriable=True" in full and "refused: 1" in full, full
    # The config read from the environment names the target, never the token.
    assert running.target in from_env and TOKENS["gw-a"] not in from_env, from_env
