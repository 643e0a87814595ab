"""The pure parts of admission: quotas on a fake clock, the estimate, settings, tokens file."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from headwater.gateway.config import GatewayConfig
from headwater.ingest.admission.auth import ANONYMOUS, Gateway, TokensFileError, parse_tokens
from headwater.ingest.admission.limits import (
    MIN_RECORD_BYTES,
    RECORD_HEADER_BYTES,
    Admission,
    ProduceTimeEstimate,
    producer_queue_limits,
    transport_options,
)
from headwater.ingest.admission.quotas import GatewayQuotas
from headwater.ingest.errors import OverloadedError
from headwater.ingest.settings import GATEWAY_FRAME_TIMEOUT_SECONDS, IngestSettings
from headwater.runtime.env import SettingError


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


GW = Gateway("gw-1", "t", ("*",))


def test_rate_allows_a_burst_then_refuses_until_the_debt_is_paid():
    clock = Clock()
    quotas = GatewayQuotas(1000, 0, 0.25, clock)
    quotas.check(GW, 3000)  # a full bucket lets one large call through...
    quotas.take(GW, 3000)
    with pytest.raises(OverloadedError) as err:  # ...and it is paid back before the next
        quotas.check(GW, 10)
    assert err.value.limit == "gateway_rate_bytes_per_second"
    assert err.value.retry_delay_s == pytest.approx(2.0)
    clock.now += 2.01
    quotas.check(GW, 10)


def test_a_refused_check_costs_no_tokens():
    clock = Clock()
    quotas = GatewayQuotas(1000, 500, 0.25, clock)
    quotas.take(GW, 400)
    for _ in range(5):
        with pytest.raises(OverloadedError) as err:
            quotas.check(GW, 200)
        assert err.value.limit == "gateway_max_inflight_bytes"
    quotas.give(GW, 400)
    quotas.check(GW, 200)  # 600 tokens left: never spent by the refusals


def test_in_flight_share_always_admits_a_gateway_holding_nothing():
    quotas = GatewayQuotas(0, 100, 0.25, Clock())
    quotas.check(GW, 10_000)
    quotas.take(GW, 10_000)
    with pytest.raises(OverloadedError):
        quotas.check(GW, 1)
    quotas.give(GW, 10_000)
    assert quotas.inflight_by_gateway() == {"gw-1": 0}


def test_tokens_file_overrides_win_and_zero_turns_a_limit_off():
    quotas = GatewayQuotas(1000, 100, 0.25, Clock())
    custom = Gateway("gw-2", "t", ("*",), rate_bytes_per_second=0, max_inflight_bytes=50)
    assert quotas.limits_of(custom) == (0, 50)
    assert quotas.limits_of(GW) == (1000, 100)
    for _ in range(10):
        quotas.check(custom, 10_000)
        quotas.take(custom, 10_000)
        quotas.give(custom, 10_000)


def test_anonymous_callers_get_only_the_process_bounds():
    quotas = GatewayQuotas(1, 1, 0.25, Clock())
    for _ in range(10):
        quotas.check(ANONYMOUS, 10_000)
        quotas.take(ANONYMOUS, 10_000)
    assert quotas.inflight_by_gateway() == {}


def test_process_bound_books_nothing_when_it_refuses():
    admission = Admission(
        IngestSettings(
            max_inflight_bytes=1000,
            gateway_rate_bytes_per_second=1_000_000,
            gateway_max_inflight_bytes=0,
        )
    )
    ticket = admission.admit(GW, 800)
    with pytest.raises(OverloadedError) as err:
        admission.admit(GW, 300)
    assert (err.value.limit, err.value.subject) == ("max_inflight_bytes", "ingest-process")
    assert admission.in_use == 800
    ticket.release()
    ticket.release()  # idempotent: a ticket gives back its bytes once
    assert admission.in_use == 0
    admission.admit(GW, 1000).release()


async def test_bodies_being_read_count_at_the_largest_size_not_a_trainable_estimate():
    """The issue-23 sequence: 100 calls of 80 bytes, then 1,024 large calls at once."""
    mib = 1024 * 1024
    admission = Admission(
        IngestSettings(
            max_inflight_bytes=8 * mib,
            max_request_bytes=4 * mib,
            gateway_rate_bytes_per_second=0,
            gateway_max_inflight_bytes=0,
            overload_retry_delay_s=0.1,
        )
    )
    for _ in range(100):  # train the size estimate down to ~80 bytes
        admission.check_room(GW)
        admission.admit(GW, 80).release()
    assert admission.typical_request < 100
    peak = reading_now = most_reading = 0
    outcomes: list[str] = []

    async def large_call() -> None:
        nonlocal peak, reading_now, most_reading
        try:
            admission.check_room(GW)  # the trained estimate lets every one through here
            async with admission.reading_body(ANONYMOUS, 5.0):
                reading_now += 1
                most_reading = max(most_reading, reading_now)
                peak = max(peak, admission.reading_bytes)
                await asyncio.sleep(0.002)  # the body arriving
                reading_now -= 1
            admission.admit(GW, 4 * mib - 1000).release()
            outcomes.append("written")
        except OverloadedError as err:
            outcomes.append(err.limit)

    await asyncio.gather(*(large_call() for _ in range(1024)))
    assert len(outcomes) == 1024
    assert most_reading <= 2, "more 4 MiB bodies were read at once than the bound holds"
    assert peak <= 8 * mib, "reservations of bodies being read passed the bound"
    assert set(outcomes) <= {"written", "max_inflight_bytes"}
    assert outcomes.count("written") >= 2, "waiting reads were never let in"
    assert (admission.in_use, admission.reading_bytes) == (0, 0)


async def test_a_read_waits_for_room_in_line_and_is_refused_if_none_comes():
    admission = Admission(
        IngestSettings(
            max_inflight_bytes=1000,
            max_request_bytes=600,
            gateway_max_inflight_bytes=0,
            overload_retry_delay_s=2.0,
        )
    )
    first, second = GW, Gateway("gw-2", "t", ("*",))
    done_reading = asyncio.Event()
    entered = asyncio.Event()

    async def slow_body() -> None:
        async with admission.reading_body(first, None):
            await done_reading.wait()

    async def next_body() -> None:
        async with admission.reading_body(second, None):
            entered.set()

    slow = asyncio.create_task(slow_body())
    await asyncio.sleep(0.01)
    waiting = asyncio.create_task(next_body())
    await asyncio.sleep(0.05)
    assert not entered.is_set(), "two 600-byte reservations do not fit 1,000 bytes"
    assert admission.reads.count == 1
    held = admission.admit(first, 900)  # admitted bytes have their own room
    done_reading.set()  # the first body is read: the waiting one goes in
    await asyncio.wait_for(asyncio.gather(slow, waiting), 1)
    held.release()
    # A read that cannot get room before its deadline is refused, not queued forever.
    done_reading.clear()
    slow = asyncio.create_task(slow_body())
    await asyncio.sleep(0.01)
    with pytest.raises(OverloadedError, match="HEADWATER_INGEST_MAX_INFLIGHT_BYTES"):
        async with admission.reading_body(second, 0.05):
            pass
    done_reading.set()
    await slow
    assert admission.reading_bytes == 0


async def test_a_gateway_whose_bodies_never_come_holds_one_read_and_others_still_read():
    admission = Admission(
        IngestSettings(
            max_inflight_bytes=8000,
            max_request_bytes=3000,
            gateway_max_inflight_bytes=0,
            overload_retry_delay_s=0.05,
        )
    )
    silent, other = GW, Gateway("gw-2", "t", ("*",))
    never = asyncio.Event()

    async def silent_call() -> None:
        async with admission.reading_body(silent, 30.0):
            await never.wait()

    held = [asyncio.create_task(silent_call()) for _ in range(3)]
    await asyncio.sleep(0.05)
    assert admission.reads.by_gateway == {"gw-1": 1}, "a gateway reads one body at a time"
    for _ in range(3):  # the other gateway reads on, one body after another
        async with admission.reading_body(other, 0.5):
            assert admission.reading_bytes == 6000
    never.set()
    await asyncio.gather(*held)
    assert (admission.reading_bytes, admission.reads.by_gateway) == (0, {})


def test_the_gateway_share_is_checked_before_the_body_too():
    admission = Admission(
        IngestSettings(max_inflight_bytes=10_000, gateway_max_inflight_bytes=1000)
    )
    held = admission.admit(GW, 900)  # typical request now ~90 B: 900 + 90 fits
    admission.check_room(GW)
    other = admission.admit(GW, 100)
    with pytest.raises(OverloadedError) as err:
        admission.check_room(GW)
    assert (err.value.limit, err.value.subject) == ("gateway_max_inflight_bytes", "gateway:gw-1")
    held.release()
    other.release()


def test_pending_calls_bound_reaches_grpc_core():
    options = dict(transport_options(IngestSettings(max_pending_calls=5)))
    assert options["grpc.server.max_pending_requests"] == 5
    assert options["grpc.server.max_pending_requests_hard_limit"] == 10


def test_slots_refuse_beyond_their_limit_and_are_counted_apart():
    admission = Admission(IngestSettings(max_concurrent_rpcs=1, max_streams=1))
    with admission.rpc_slot(GW), admission.stream_slot(GW):
        with pytest.raises(OverloadedError, match="HEADWATER_INGEST_MAX_CONCURRENT_RPCS"):
            admission.rpc_slot(GW).__enter__()
        with pytest.raises(OverloadedError, match="HEADWATER_INGEST_MAX_STREAMS"):
            admission.stream_slot(GW).__enter__()
    with admission.rpc_slot(GW):  # given back by the block, errors included
        assert admission.rpcs == 1
    assert (admission.rpcs, admission.streams, admission.rpcs_by_gateway) == (0, 0, {})


def test_each_gateway_has_its_own_slot_limits_with_tokens_file_overrides():
    admission = Admission(IngestSettings(gateway_max_concurrent_rpcs=2, gateway_max_streams=1))
    other = Gateway("gw-2", "t", ("*",))
    roomy = Gateway("gw-3", "t", ("*",), max_streams=3, max_concurrent_rpcs=0)
    with contextlib.ExitStack() as held:
        held.enter_context(admission.stream_slot(GW))
        with pytest.raises(OverloadedError) as err:
            held.enter_context(admission.stream_slot(GW))
        assert (err.value.limit, err.value.subject, err.value.limit_value) == (
            "gateway_max_streams",
            "gateway:gw-1",
            1,
        )
        held.enter_context(admission.stream_slot(other))  # another gateway is unaffected
        for _ in range(3):
            held.enter_context(admission.stream_slot(roomy))
        for _ in range(2):
            held.enter_context(admission.rpc_slot(GW))
        with pytest.raises(OverloadedError, match="HEADWATER_INGEST_GATEWAY_MAX_CONCURRENT"):
            held.enter_context(admission.rpc_slot(GW))
        for _ in range(10):  # 0: no per-gateway limit
            held.enter_context(admission.rpc_slot(roomy))
        for _ in range(5):  # anonymous: the process limits only
            held.enter_context(admission.stream_slot(ANONYMOUS))
    assert (admission.streams_by_gateway, admission.rpcs_by_gateway) == ({}, {})
    assert (admission.streams, admission.rpcs) == (0, 0)


def test_deadline_check_uses_the_floor_and_the_recent_produce_time():
    admission = Admission(IngestSettings(min_deadline_s=0.1))
    admission.check_deadline(None)
    admission.check_deadline(0.2)
    with pytest.raises(OverloadedError) as err:
        admission.check_deadline(0.05)
    assert err.value.limit == "min_deadline_ms"
    for _ in range(30):
        admission.produce_time.record(2.0)
    with pytest.raises(OverloadedError):
        admission.check_deadline(1.0)


def test_produce_time_estimate_decays_when_nothing_finishes():
    clock = Clock()
    estimate = ProduceTimeEstimate(clock)
    for _ in range(50):
        estimate.record(4.0)
    assert estimate.value() == pytest.approx(4.0, rel=0.01)
    clock.now += 10  # e.g. a broker stall: no produce finished, none refused forever
    assert estimate.value() < 0.01


def test_producer_queue_limits_follow_the_in_flight_bound():
    size, records = producer_queue_limits(8 * 1024 * 1024)
    assert records == 8 * 1024 * 1024 // MIN_RECORD_BYTES
    assert size == 8 * 1024 * 1024 + records * RECORD_HEADER_BYTES
    assert producer_queue_limits(16 * 1024 * 1024)[0] > size


def test_stream_frame_deadline_is_below_the_gateways_frame_timeout():
    assert GatewayConfig(target="x").call_timeout_s == GATEWAY_FRAME_TIMEOUT_SECONDS
    assert IngestSettings().stream_frame_timeout_seconds < GATEWAY_FRAME_TIMEOUT_SECONDS


def test_new_settings_are_read_from_the_environment():
    s = IngestSettings.from_env(
        {
            "HEADWATER_INGEST_ALLOW_UNAUTHENTICATED": "true",
            "HEADWATER_INGEST_MAX_STREAMS": "7",
            "HEADWATER_INGEST_STREAM_FRAME_TIMEOUT_SECONDS": "3.5",
            "HEADWATER_INGEST_MIN_DEADLINE_SECONDS": "0.02",
            "HEADWATER_INGEST_GATEWAY_RATE_BYTES_PER_SECOND": "0",
            "HEADWATER_INGEST_GATEWAY_MAX_INFLIGHT_BYTES": "1048576",
            "HEADWATER_INGEST_MAX_PENDING_CALLS": "9",
            "HEADWATER_INGEST_GATEWAY_MAX_CONCURRENT_RPCS": "5",
            "HEADWATER_INGEST_GATEWAY_MAX_STREAMS": "0",
        }
    )
    assert s.max_pending_calls == 9
    assert (s.gateway_max_concurrent_rpcs, s.gateway_max_streams) == (5, 0)
    assert (s.max_streams, s.stream_frame_timeout_seconds, s.min_deadline_s) == (7, 3.5, 0.02)
    assert (s.gateway_rate_bytes_per_second, s.gateway_max_inflight_bytes) == (0, 1048576)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"HEADWATER_INGEST_MAX_STREAMS": "0"}, "must be at least 1"),
        ({"HEADWATER_INGEST_MAX_PENDING_CALLS": "0"}, "must be at least 1"),
        ({"HEADWATER_INGEST_GATEWAY_RATE_BYTES_PER_SECOND": "-1"}, "must be at least 0"),
        ({"HEADWATER_INGEST_GATEWAY_MAX_STREAMS": "-1"}, "must be at least 0"),
        ({"HEADWATER_INGEST_GATEWAY_MAX_INFLIGHT_BYTES": str(2**30)}, "share cannot be larger"),
        ({"HEADWATER_INGEST_STREAM_FRAME_TIMEOUT_SECONDS": "soon"}, "is not a number"),
    ],
)
def test_bad_overload_settings_are_refused_with_a_clear_message(env, message):
    with pytest.raises(SettingError, match=message):
        IngestSettings.from_env({"HEADWATER_INGEST_ALLOW_UNAUTHENTICATED": "true", **env})


def test_tokens_file_limits_are_parsed_and_checked():
    gateways = parse_tokens(
        """
gateways:
  - {id: a, tenant: t, devices: ["*"], rate_bytes_per_second: 500, max_inflight_bytes: 0}
  - {id: b, tenant: t, devices: ["*"]}
"""
    )
    assert (gateways["a"].rate_bytes_per_second, gateways["a"].max_inflight_bytes) == (500, 0)
    assert (gateways["b"].rate_bytes_per_second, gateways["b"].max_inflight_bytes) == (None, None)
    slots = parse_tokens("gateways: [{id: a, tenant: t, max_streams: 2, max_concurrent_rpcs: 0}]")
    assert (slots["a"].max_streams, slots["a"].max_concurrent_rpcs) == (2, 0)
    with pytest.raises(TokensFileError, match="max_streams"):
        parse_tokens("gateways: [{id: a, tenant: t, max_streams: -1}]")
    for bad in ("-1", "1.5", "true", "lots"):
        with pytest.raises(TokensFileError, match="rate_bytes_per_second"):
            parse_tokens(f"gateways: [{{id: a, tenant: t, rate_bytes_per_second: {bad}}}]")
