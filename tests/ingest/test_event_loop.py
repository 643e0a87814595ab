"""``HEADWATER_INGEST_EVENT_LOOP``: the service's coroutine runs on the loop it names."""

from __future__ import annotations

import asyncio

import pytest

from headwater.ingest import event_loop
from headwater.ingest.settings import IngestSettings


async def loop_module() -> str:
    await asyncio.sleep(0)
    return type(asyncio.get_running_loop()).__module__.split(".")[0]


@pytest.mark.parametrize("kind", ["uvloop", "asyncio"])
def test_run_uses_the_named_loop_and_returns_the_result(kind):
    assert event_loop.run(loop_module(), kind) == kind


def test_uvloop_is_the_default():
    settings = IngestSettings.from_env({"HEADWATER_INGEST_ALLOW_UNAUTHENTICATED": "1"})
    assert settings.event_loop == "uvloop"
    env = {"HEADWATER_INGEST_ALLOW_UNAUTHENTICATED": "1", "HEADWATER_INGEST_EVENT_LOOP": "AsyncIO"}
    assert IngestSettings.from_env(env).event_loop == "asyncio"
