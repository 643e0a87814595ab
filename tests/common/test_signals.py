"""headwater.runtime.signals: each flavour stops on SIGINT and SIGTERM, whatever was inherited.

A child process ignores SIGINT and blocks both signals before it installs the handlers (as
a hostile parent would leave them: ignored dispositions and the signal mask survive exec),
says "ready", and must then end by its own stop path when signalled.
"""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from tests.support import launch

HOSTILE = """
import signal
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
"""

FLAVOURS = {
    "stop_event": """
from headwater.runtime.signals import stop_event
stop = stop_event()
print("ready", flush=True)
assert stop.wait(60)
print("stopped", flush=True)
""",
    "async_stop_event": """
import asyncio
from headwater.runtime.signals import async_stop_event

async def main():
    stop = async_stop_event()
    print("ready", flush=True)
    await asyncio.wait_for(stop.wait(), 60)
    print("stopped", flush=True)

asyncio.run(main())
""",
    "interrupt_on_stop": """
import time
from headwater.runtime.signals import interrupt_on_stop
interrupt_on_stop()
try:  # "ready" inside: the signal may come while it is being printed
    print("ready", flush=True)
    time.sleep(60)
except KeyboardInterrupt:
    print("stopped", flush=True)
""",
    # pyspark's SparkContext does this to SIGINT; the handler from before comes back.
    "sigint_kept": """
import signal
from headwater.runtime.signals import sigint_kept, stop_event
stop = stop_event()
with sigint_kept():
    signal.signal(signal.SIGINT, lambda *_: print("the library's handler", flush=True))
print("ready", flush=True)
assert stop.wait(60)
print("stopped", flush=True)
""",
}


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("flavour", list(FLAVOURS))
def test_each_flavour_stops_on_both_signals_despite_what_it_inherited(flavour, sig):
    script = HOSTILE + FLAVOURS[flavour]
    with launch.launched(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as proc:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        proc.send_signal(sig)
        # The bound only fails a hang: an ignored signal would leave it sleeping 60 s.
        out, err = proc.communicate(timeout=30)
    assert (out, proc.returncode) == ("stopped\n", 0), err
